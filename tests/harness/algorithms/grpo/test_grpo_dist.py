"""GRPO on 2 CPU processes: a trainer that scales its advantages by its own rank's batch std fails advantages."""

from __future__ import annotations

import pytest
import torch

from tests.support.gate_run import documented_run, verify_dist

pytestmark = pytest.mark.dist


def per_rank_std(spec, accelerator=None):
    """The reference GRPO trainer with scale_rewards="batch" taken over each rank's completions only."""
    from harness.algorithms.grpo.targets.reference import factory

    run = factory(spec, accelerator)
    module, train, world = run.module, run.train, run.trainer.accelerator.num_processes
    original = module.group_advantages

    def group_advantages(rewards, size, scale_rewards):
        if scale_rewards != "batch":
            return original(rewards, size, scale_rewards)
        parts = [original(chunk, size, scale_rewards) for chunk in rewards.chunk(world)]
        return torch.cat([a for a, _ in parts]), torch.cat([z for _, z in parts])

    def patched_train():
        module.group_advantages = group_advantages
        try:
            return train()
        finally:
            module.group_advantages = original

    run.train = patched_train
    return run


per_rank_std.algorithm = "grpo"


def policy_loss_dropped(spec, accelerator=None):
    """The reference GRPO trainer, which declares `policy_loss` (`optional_metrics`), with it left out of every log."""
    from harness.algorithms.grpo.targets.reference import factory

    run = factory(spec, accelerator)
    train = run.train
    run.train = lambda: [{k: v for k, v in log.items() if k != "policy_loss"} for log in train()]
    return run


policy_loss_dropped.algorithm = "grpo"
policy_loss_dropped.optional_metrics = ("policy_loss",)


@pytest.mark.slow  # gate processes: the full tier
def test_advantages_scaled_by_a_ranks_own_std_fail_across_ranks(tmp_path):
    code, report, output = verify_dist(tmp_path, "tests.harness.algorithms.grpo.test_grpo_dist:per_rank_std")
    assert code == 1, output[-3000:]
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["advantages[ranks=2]"] == "fail" and statuses["completion_mask[ranks=2]"] == "pass"
    (advantages,) = [c for c in report["checks"] if c["id"] == "advantages[ranks=2]"]
    assert "are not the oracle's over every rank's scores" in advantages["message"]


@pytest.mark.slow
@pytest.mark.trl
def test_trl_grpo_across_two_processes_fails_its_pooling_alone(tmp_path):
    """TRL's GRPOTrainer on 2 ranks (beta != 0: each rank saves and reloads its own reference model): its logs fail
    as its flat mean of micro-batch means does on one process, and its entropy bonus as its per-micro-batch bonus
    does (class 82); its policy gradient, advantages, masks and reward inputs over both ranks pass."""
    pytest.importorskip("trl")
    code, report, output = documented_run("python -m harness verify-dist --target trl-grpo", __file__, tmp_path)
    assert code == 1, output[-3000:]
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    fails = {"uneven_lengths[ranks=2]", "freshness[ranks=2]"}
    assert {c for c, s in statuses.items() if s == "fail"} == fails | {"entropy_gradient[ranks=2]"}, output[-3000:]
    (bonus,) = [c for c in report["checks"] if c["id"] == "entropy_gradient[ranks=2]"]
    assert [(m["name"], m["diagnosis"]["classes"]) for m in bonus["metrics"] if m["failed"]] == [
        ("gradient/entropy_relative", [82])]  # fmt: skip
    assert {c for c, s in statuses.items() if s == "pass"} == {
        "logp_gradient[ranks=2]", "logp_gradient[ranks=2,loss_type=grpo]", "logp_gradient[ranks=2,loss_type=bnpo]",
        "logp_gradient[ranks=2,run=top_entropy]", "advantages[ranks=2]", "completion_mask[ranks=2]",
        "reward_inputs[ranks=2]", "sampling[ranks=2]",  # TRL seeds each process apart (device_specific=True)
        "lr_schedule[ranks=2]",  # transformers' Trainer steps its scheduler once per optimizer step on every rank
    }  # fmt: skip
    for check in report["checks"]:
        if check["id"] in fails:
            assert "entropy" in check["message"] and "clip_ratio/high_max" in check["message"]
            assert "policy_loss is not logged" in check["message"]


@pytest.mark.slow
def test_a_declared_policy_loss_missing_on_every_rank_fails_the_pooled_checks(tmp_path):
    """As on one process: a metric the target declares it logs is held to across ranks too, and its absence is a
    failure, not the note a target that declares nothing gets; the checks that do not read the logs pass."""
    code, report, output = verify_dist(tmp_path, "tests.harness.algorithms.grpo.test_grpo_dist:policy_loss_dropped")
    assert code == 1, output[-3000:]
    checks = {c["id"]: c for c in report["checks"]}
    failed = {i for i, c in checks.items() if c["status"] == "fail"}
    assert failed == {"uneven_lengths[ranks=2]", "freshness[ranks=2]"}, failed
    for check_id in failed:
        assert "policy_loss is declared (the target's `optional_metrics`) but no log has it (every rank;" in (
            checks[check_id]["message"]
        )


@pytest.mark.slow
def test_across_ranks_the_target_is_held_to_what_it_declares_as_on_one_process(tmp_path):
    """verify-dist reads the target's declarations: the definitions it declares are the oracle's (its advantage
    epsilon), and a metric it declares it does not log is left out with the note; declaring neither, the same
    trainer fails the pooled checks, naming the metric, and the advantages (TRL's 1e-4 is not its epsilon)."""
    from tests.support.dist_declared import DROPPED
    from tests.support.unlogged_doubles import NOTE

    code, report, output = verify_dist(tmp_path / "declaring", "tests.support.dist_declared:declaring")
    assert code == 0, output[-3000:]
    checks = {c["id"]: c for c in report["checks"]}
    for check_id in ("uneven_lengths[ranks=2]", "freshness[ranks=2]"):
        assert checks[check_id]["status"] == "pass" and f"{NOTE}{DROPPED}" in checks[check_id]["message"]
    code, report, output = verify_dist(tmp_path / "undeclared", "tests.support.dist_declared:undeclared")
    failed = {c["id"]: c["message"] for c in report["checks"] if c["status"] == "fail"}
    assert code == 1 and set(failed) == {"uneven_lengths[ranks=2]", "freshness[ranks=2]", "advantages[ranks=2]"}, (
        output[-3000:]
    )
    assert all(DROPPED in failed[c] for c in ("uneven_lengths[ranks=2]", "freshness[ranks=2]"))
