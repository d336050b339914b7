"""The GRPO gate: its oracle on hand-made records, its spec, failing loudly, and the reference passing."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch

from harness.algorithms import cases
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle.expect import expected_metrics, intervals
from harness.algorithms.grpo.oracle.records import record_problems
from harness.algorithms.grpo.scenarios import pooled as scenarios
from harness.algorithms.grpo.spec import GRPOSpec, parse_settings
from harness.errors import HarnessConfigError
from harness.instrument.observe import Crashed, Observation, ObservationCache
from tests.support import forked
from tests.support.gate_run import verify
from tests.support.gates import gate, reference
from tests.support.grpo_doubles import FixedCache, altered, grpo_check, ran, record

ROOT = Path(__file__).resolve().parents[5]


def values(expected):
    return {name: e.value for name, e in expected.items()}


# ---------------------------------------------------------------- the oracle on hand-made records


def test_token_means_pool_over_every_token_not_over_micro_batches():
    # micro-batch 1: 3 tokens of entropy 1; micro-batch 2: 1 token of entropy 5 -> (3 + 5) / 4 = 2, not (1 + 5) / 2
    one = record([[1, 1, 1]], [[0.0, 0.0, 0.0]], [1.0], entropies=[[1.0, 1.0, 1.0]])
    two = record([[1, 0, 0]], [[0.0, 0.0, 0.0]], [1.0], entropies=[[5.0, 9.0, 9.0]])
    spec = GRPOSpec(beta=0.0)
    got = values(expected_metrics([one, two], spec))
    assert got["entropy"] == pytest.approx(2.0)
    assert "kl" not in got
    # dapo and bnpo: token mean of -A = -1; grpo: the mean of completion means; dr_grpo: sum / (2 * 12)
    assert got["policy_loss"] == pytest.approx(-1.0)
    assert values(expected_metrics([one, two], spec.with_(loss_type="dr_grpo")))["policy_loss"] == pytest.approx(
        -4 / 24
    )
    assert values(expected_metrics([one, two], spec.with_(loss_type="grpo")))["policy_loss"] == pytest.approx(-1.0)


def test_clip_flags_and_true_extremes():
    up, down = math.log(1.5), math.log(0.5)  # ratios 1.5 and 0.5: outside [0.8, 1.2]
    # completion a (A > 0): 1 of 2 tokens above 1.2; completion b (A < 0): 1 of 1 token below 0.8
    first = record([[1, 1], [1, 0]], [[up, 0.0], [down, 0.0]], [1.0, -1.0], old=[[0.0, 0.0], [0.0, 0.0]])
    # completion c (A > 0): none of 4 tokens clipped
    second = record([[1, 1, 1, 1]], [[0.0] * 4], [1.0], old=[[0.0] * 4])
    got = values(expected_metrics([first, second], GRPOSpec(beta=0.0)))
    assert got["clip_ratio/high_mean"] == pytest.approx(1 / 7)
    assert got["clip_ratio/low_mean"] == pytest.approx(1 / 7)
    assert got["clip_ratio/region_mean"] == pytest.approx(2 / 7)
    assert got["clip_ratio/high_max"] == pytest.approx(0.5)  # not the mean of micro-batch maxima, 0.25
    assert got["clip_ratio/low_min"] == 0.0
    # -min(r A, clip(r) A): a: -min(1.5, 1.2) = -1.2 and -1; b: -min(-0.5, -0.8) = 0.8; c: -1 each
    assert got["policy_loss"] == pytest.approx((-1.2 - 1.0 + 0.8 - 4.0) / 7)


def test_k3_with_and_without_the_bias_correction():
    gap = 0.3  # ref - logp
    r = record([[1]], [[0.0]], [0.0], old=[[-0.1]], ref=[[gap]])
    k3 = math.exp(gap) - gap - 1
    spec = GRPOSpec(beta=0.5)
    assert values(expected_metrics([r], spec))["kl"] == pytest.approx(k3 * math.exp(0.1))
    plain = values(expected_metrics([r], spec.with_(use_bias_correction_kl=False)))
    assert plain["kl"] == pytest.approx(k3)
    assert plain["policy_loss"] == pytest.approx(0.5 * k3)  # A = 0: the KL term alone


def test_empty_micro_batches_add_nothing_and_an_empty_interval_logs_zero():
    full = record([[1, 1]], [[0.0, 0.0]], [1.0], entropies=[[2.0, 2.0]])
    empty = record([[0, 0]], [[0.0, 0.0]], [1.0], entropies=[[7.0, 7.0]])
    got = values(expected_metrics([full, empty], GRPOSpec(beta=0.0)))
    assert got["entropy"] == pytest.approx(2.0) and got["policy_loss"] == pytest.approx(-1.0)
    nothing = values(expected_metrics([empty], GRPOSpec(beta=0.0)))
    assert nothing["entropy"] == 0.0 and nothing["clip_ratio/high_max"] == 0.0


def test_what_the_records_do_not_hold_is_not_recomputable():
    assert all(e.value is None for e in expected_metrics([], GRPOSpec()).values())
    r = dataclasses.replace(record([[1]], [[0.0]], [1.0]), entropies=None)
    got = expected_metrics([r], GRPOSpec(beta=0.04))  # no entropies, no reference log-probs
    assert got["entropy"].value is None and "entropies" in got["entropy"].reason
    assert got["kl"].value is None and "reference log-probs" in got["kl"].reason
    assert record_problems(dataclasses.replace(r, logps=None)) == ["logps is None"]
    bad = record([[1, 1]], [[0.0, 0.0]], [1.0, 2.0])
    assert any("advantages" in p for p in record_problems(bad))


def test_records_are_split_into_intervals_by_their_window():
    spec = GRPOSpec(max_steps=3, logging_steps=2)
    rs = [record([[1]], [[0.0]], [1.0], window=w) for w in (0, 0, 1, 2)]
    assert [len(i) for i in intervals(rs, spec)] == [3, 1]


# ---------------------------------------------------------------- the spec


def test_the_spec_derives_windows_and_rejects_sizes_that_do_not_divide():
    short = GRPOSpec(per_device_train_batch_size=2, gradient_accumulation_steps=3, steps_per_generation=4, max_steps=3)
    assert short.window_sizes == (3, 1) and short.run_windows() == [3, 1, 3]
    assert GRPOSpec(max_steps=5, logging_steps=2).total_logs == 3
    with pytest.raises(HarnessConfigError, match="not divisible by num_generations=4"):
        GRPOSpec(per_device_train_batch_size=3, gradient_accumulation_steps=1).validate()
    with pytest.raises(HarnessConfigError, match="loss_type='gspo'"):
        GRPOSpec(loss_type="gspo").validate()
    with pytest.raises(HarnessConfigError, match="sapo_temperature_pos=0"):
        GRPOSpec(sapo_temperature_pos=0.0).validate()
    assert GRPOSpec().optimizer_settings == {}  # none declared: the trainer's own, not judged
    declared = GRPOSpec(adam_beta1=0.8, adam_beta2=0.99, adam_epsilon=1e-6)
    assert declared.optimizer_settings == {"betas": (0.8, 0.99), "eps": 1e-6}
    for adam in ({"adam_beta1": 0.8}, {"adam_beta1": 1.0, "adam_beta2": 0.99, "adam_epsilon": 1e-6},
                 {"adam_beta1": 0.8, "adam_beta2": 0.99, "adam_epsilon": 0.0}):  # fmt: skip
        with pytest.raises(HarnessConfigError, match="set all three or none"):
            GRPOSpec(**adam).validate()
    assert parse_settings(["loss_type=bnpo", "beta=0"]) == {"loss_type": "bnpo", "beta": 0.0}
    assert parse_settings(["dropout=0.1"]) == {"dropout": 0.1}
    with pytest.raises(HarnessConfigError, match="dropout=1.0"):
        parse_settings(["dropout=1"])
    with pytest.raises(HarnessConfigError, match="KEY one of"):
        parse_settings(["kl_coef=0.1"])
    assert hash(GRPOSpec()) == hash(GRPOSpec())  # the observation cache's key


# ---------------------------------------------------------------- failing loudly on what it did not see


GOOD = {"entropy": 1.0, "kl": 0.1, "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0,
        "clip_ratio/region_mean": 0.0, "clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.0,
        "policy_loss": 0.0}  # fmt: skip


def test_no_loss_records_fail_every_pooled_check():
    cache = FixedCache(lambda spec: Observation(spec, ran([dict(GOOD)] * spec.total_logs)))
    for check_id in ("uneven_lengths[loss_type=dapo]", "short_window", "extremes", "freshness", "all_masked",
                     "logp_gradient[loss_type=dapo]", "logp_gradient[run=beta0]", "off_policy[loss_type=cispo]",
                     "logp_gradient[run=off_policy,loss_type=sapo]"):  # fmt: skip
        result = grpo_check(check_id, cache)
        assert not result.passed and "recorded no loss inputs" in result.message, check_id


def test_a_crashed_run_fails_every_grpo_check():
    cache = FixedCache(lambda spec: Observation(spec, Crashed("RuntimeError: boom")))
    for c in cases("grpo"):
        result = c.run(cache, GRPOSpec())
        assert not result.passed and "RuntimeError: boom" in result.message, c.id


def test_no_optimizer_step_fails_the_gradient_checks():
    cache = FixedCache(lambda spec: Observation(spec, ran([dict(GOOD)] * spec.total_logs)))
    assert "optimizer steps per cut [0, 0, 0, 0]" in grpo_check("gradient_partition[loss_type=dapo]", cache).message
    assert not grpo_check("every_microbatch_applied", cache).passed


@pytest.fixture(scope="module")
def reference_cache():
    return reference("grpo")


def test_the_reference_passes_and_a_missing_or_nan_metric_fails(reference_cache, monkeypatch):
    assert grpo_check("uneven_lengths[loss_type=dapo]", reference_cache).passed
    obs = reference_cache.get(scenarios.spec_for(scenarios.UNEVEN, GRPOSpec()), spy=False)
    records = recorded(obs.ran).loss_inputs
    assert {r.window for r in records} == {0, 1, 2, 3} and all(r.old_logps is not None for r in records)
    assert all(r.logps.dtype == torch.float64 and r.completion_mask.dtype == torch.bool for r in records)
    for change, why in ((lambda log: log.pop("kl"), "never logged kl"),
                        (lambda log: log.update(entropy=math.nan), "non-finite logged values entropy=nan"),
                        (lambda log: log.update(entropy="high"), "not numbers entropy='high'")):  # fmt: skip
        logs = [dict(log) for log in obs.ran.logs]
        change(logs[0])
        broken = Observation(obs.spec, ran(logs, records))
        result = grpo_check("uneven_lengths[loss_type=dapo]", FixedCache(lambda spec, b=broken: b))
        assert not result.passed and why in result.message


def test_a_declared_policy_loss_logged_under_another_name_fails_the_pooled_checks(reference_cache):
    """The reference declares `policy_loss` (`factory.optional_metrics`, read into its resolved `Target`): its logs
    with the name changed fail every pooled check; a target that declares nothing gets today's note (TRL logs it
    only with an entropy bonus)."""
    obs = reference_cache.get(scenarios.spec_for(scenarios.UNEVEN, GRPOSpec()), spy=False)
    renamed = [{("POLICY_LOSS" if k == "policy_loss" else k): v for k, v in log.items()} for log in obs.ran.logs]
    broken = Observation(obs.spec, ran(renamed, recorded(obs.ran).loss_inputs))
    from harness.targets import resolve

    target = resolve("reference-grpo")
    assert target.optional_metrics == ("policy_loss",)
    result = grpo_check("uneven_lengths[loss_type=dapo]", FixedCache(lambda spec: broken, target))
    assert not result.passed and "policy_loss is declared (the target's `optional_metrics`)" in result.message
    silent = grpo_check("uneven_lengths[loss_type=dapo]", FixedCache.of(broken))
    assert silent.passed and any("policy_loss is not logged" in n for n in silent.notes)
    declaring = dataclasses.replace(target, optional_metrics=("policy_loss", "loss"))
    result = grpo_check("uneven_lengths[loss_type=dapo]", FixedCache(lambda spec: broken, declaring))
    assert not result.passed and "declares loss among its optional metrics" in result.message


def test_loss_records_wider_than_max_completion_length_fail_the_pooled_checks(reference_cache):
    """Completions padded past max_completion_length (pad columns every mask leaves out, so every statistic is the
    same): no record may be wider than a completion can be."""
    obs = reference_cache.get(scenarios.spec_for(scenarios.UNEVEN, GRPOSpec()), spy=False)

    def widened(r):
        pad = lambda t: None if t is None else torch.nn.functional.pad(t, (0, 3))  # noqa: E731
        return dataclasses.replace(r, completion_mask=pad(r.completion_mask), logps=pad(r.logps),
                                   old_logps=pad(r.old_logps), ref_logps=pad(r.ref_logps),
                                   entropies=pad(r.entropies), completion_ids=pad(r.completion_ids))  # fmt: skip

    records = tuple(widened(r) for r in recorded(obs.ran).loss_inputs)
    wide = altered(obs, loss_inputs=records)
    result = grpo_check("uneven_lengths[loss_type=dapo]", FixedCache.of(wide))
    assert not result.passed and "loss records 15 positions wide" in result.message, result.message
    assert grpo_check("uneven_lengths[loss_type=dapo]", FixedCache.of(obs)).passed


def test_an_empty_interval_must_log_zero_not_nan_or_a_carried_value(reference_cache):
    """empty_interval: the reference logs 0 in its intervals without a token and passes; NaN there, or the previous
    interval's entropy carried over, fails; extremes left out there (TRL) are a note."""
    obs = reference_cache.get(scenarios.spec_for(scenarios.EMPTY, GRPOSpec()), spy=False)
    empty = [i for i, log in enumerate(obs.ran.logs) if log["entropy"] == 0.0]
    assert empty and empty[0] > 0 and grpo_check("empty_interval", FixedCache.of(obs)).passed
    first, records = empty[0], recorded(obs.ran).loss_inputs

    def broken(change):
        logs = [dict(log) for log in obs.ran.logs]
        change(logs, first)
        return grpo_check("empty_interval", FixedCache.of(Observation(obs.spec, ran(logs, records))))

    nan = broken(lambda logs, i: logs[i].update(entropy=math.nan))
    assert not nan.passed and f"log {first + 1}" in nan.message and "entropy=nan" in nan.message
    carried = broken(lambda logs, i: logs[i].update(entropy=logs[i - 1]["entropy"]))
    assert not carried.passed and f"entropy @ log {first + 1}" in carried.message
    left_out = broken(lambda logs, i: [logs[i].pop(n) for n in ("clip_ratio/low_min", "clip_ratio/high_max")])
    assert left_out.passed and f"log {first + 1} has no token and leaves out clip_ratio/low_min" in left_out.message
    # only where the interval has no token: an extreme left out of an interval with tokens fails
    full = next(i for i, log in enumerate(obs.ran.logs) if log["entropy"] != 0.0)
    logs = [dict(log) for log in obs.ran.logs]
    logs[full].pop("clip_ratio/high_max")
    result = grpo_check("empty_interval", FixedCache.of(Observation(obs.spec, ran(logs, records))))
    assert not result.passed and "never logged clip_ratio/high_max" in result.message


def test_kl_logged_without_a_kl_term_fails_no_kl(reference_cache):
    obs = reference_cache.get(scenarios.spec_for(scenarios.NO_KL, GRPOSpec()).with_(beta=0.0), spy=False)
    assert all("kl" not in log for log in obs.ran.logs) and grpo_check("no_kl", FixedCache.of(obs)).passed
    logs = [{**log, "kl": 0.0} for log in obs.ran.logs]
    result = grpo_check("no_kl", FixedCache.of(Observation(obs.spec, ran(logs, recorded(obs.ran).loss_inputs))))
    assert not result.passed and "kl logged at beta 0 in log(s) [1, 2, 3, 4]" in result.message


def test_reward_statistics_over_too_few_scores_and_under_the_default_weight(reference_cache):
    """reward_stats[run=small_groups]: a statistic over too few scores logged as 0 or left out passes, logged as 1
    fails (the reference's `_finite` with the wrong fallback); reward_stats[run=one_function]: every reward doubled
    (a default weight of 2) fails."""
    from harness.algorithms.grpo.oracle import rewards
    from harness.algorithms.grpo.scenarios.rewards import REWARD_RUNS, recomputed
    from harness.verdict import Check, CheckId

    def judged(check_id, run, change):
        obs = reference_cache.get(scenarios.spec_for(REWARD_RUNS[run], GRPOSpec()), spy=False)
        logs = [dict(log) for log in obs.ran.logs]
        change(logs)
        broken = altered(obs, logs=tuple(logs))
        return grpo_check(check_id, FixedCache.of(obs)), grpo_check(check_id, FixedCache.of(broken))

    few = "reward_stats[run=small_groups]"
    obs = reference_cache.get(scenarios.spec_for(REWARD_RUNS["small_groups"], GRPOSpec()), spy=False)
    _, made, rows = recomputed(obs, Check(CheckId("reward_stats")))
    # (log, name) of each statistic the oracle finds over too few scores (a std over fewer than two)
    zeros = [(i, n) for i, trained in enumerate(rows) for n, e in rewards.reward_stats(made, trained).items()
             if e.count == 0]  # fmt: skip

    def to_one(logs):
        for i, name in zeros:
            assert logs[i][name] == 0.0  # the reference logs the contract's 0
            logs[i][name] = 1.0

    good, bad = judged(few, "small_groups", to_one)
    assert good.passed and zeros and not bad.passed and zeros[0][1] in bad.message
    _, dropped = judged(few, "small_groups", lambda logs: [logs[i].pop(n) for i, n in zeros])
    assert dropped.passed and "over too few scores, not logged as a number" in dropped.message
    doubled = lambda logs: [log.update(reward=2 * log["reward"], reward_std=2 * log["reward_std"]) for log in logs]  # noqa: E731
    good, bad = judged("reward_stats[run=one_function]", "one_function", doubled)
    assert good.passed and not bad.passed and "reward" in bad.message


def test_a_factory_whose_optional_metrics_are_not_names_is_a_usage_error(monkeypatch):
    from harness.algorithms.grpo.targets import reference
    from harness.targets import resolve

    monkeypatch.setattr(reference.factory, "optional_metrics", "policy_loss", raising=False)
    with pytest.raises(HarnessConfigError, match="'reference-grpo': `optional_metrics` of the factory must be"):
        resolve("reference-grpo")


def test_a_generation_trained_short_of_a_micro_batch_is_caught():
    """Windows are read from the loss records, so a micro-batch that never ran shows only in its generation's
    count; windows that cross generations (TRL's one step counter) and a last generation cut short are right."""
    from harness.algorithms.grpo.scenarios.preconditions import untrained_micro_batches

    spec = scenarios.SHORT.with_(max_steps=4)  # 4 micro-batches per generation
    made = lambda *gens: [dataclasses.replace(record([[True]], [[0.0]], [0.0]), generation=g) for g in gens]  # noqa: E731
    assert untrained_micro_batches(made(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2), spec) == ""
    assert "per generation [3, 4], expected 4" in untrained_micro_batches(made(0, 0, 0, 1, 1, 1, 1), spec)
    assert "[4, 5]" in untrained_micro_batches(made(0, 0, 0, 0, 1, 1, 1, 1, 1), spec)


def test_a_trainer_that_skips_a_micro_batch_fails_every_microbatch_applied():
    """The reference with the first micro-batch of each window left out: every step applies exactly the
    backward passes that ran, so only the generations' counts show it."""
    from harness.algorithms.grpo.targets.reference import factory

    def skipping(spec, accelerator=None):
        run = factory(spec, accelerator)
        window_step = run.trainer.window_step
        run.trainer.window_step = lambda micro_batches: window_step(micro_batches[1:] or micro_batches)
        return run

    result = grpo_check("every_microbatch_applied", ObservationCache(skipping))
    assert not result.passed and result.message == (
        "micro-batches per generation [3, 3], expected 4 (steps_per_generation * num_iterations) for every "
        "generation but the last"
    )


def test_a_flat_mean_of_micro_batch_means_is_caught(reference_cache):
    """The logged entropy replaced by the flat mean of the micro-batches' own means (class 16)."""
    obs = reference_cache.get(scenarios.spec_for(scenarios.UNEVEN, GRPOSpec()), spy=False)
    logs = [dict(log) for log in obs.ran.logs]
    for index, records in enumerate(intervals(recorded(obs.ran).loss_inputs, obs.spec)):
        means = [float((r.entropies * r.completion_mask).sum() / r.completion_mask.sum()) for r in records]
        logs[index]["entropy"] = sum(means) / len(means)
    broken = Observation(obs.spec, ran(logs, recorded(obs.ran).loss_inputs))
    result = grpo_check("uneven_lengths[loss_type=dapo]", FixedCache(lambda spec: broken))
    assert not result.passed and "entropy @ log 1" in result.message


# ---------------------------------------------------------------- the command line


def test_checks_of_the_grpo_gate_and_their_docs():
    printed = forked.run(
        [sys.executable, "-m", "harness", "checks", "--target", "reference-grpo", "--markdown"], cwd=ROOT, check=True
    ).stdout
    assert (ROOT / "docs" / "checks-grpo.md").read_text(encoding="utf-8") == printed, (
        "docs/checks-grpo.md is stale: python -m harness checks --target reference-grpo --markdown"
    )
    # 8 loss types twice (uneven_lengths, logp_gradient), 7 cut-invariant ones (gradient_partition), 3 soft ones
    # twice (off_policy, logp_gradient off policy), 8 single checks, partition again with dropout, logp_gradient's
    # 5 runs without a loss type and its windows of one completion for grpo and dr_grpo, 3 scales twice, and the
    # mask, the forward recompute, the sampling and the reward inputs; the reward model; every micro-batch applied
    # again with the gradient clipped; an interval without a token, and a run without a KL term; the reward
    # statistics per group of four and with one function at the default weight; the optimizer's step, the schedule,
    # and logp_gradient without stored old log-probs and with unequal clip bounds; under sequence-level ratios the
    # gradient and the extremes run's statistics, the clip statistics of the unequal bounds' run, and the mask with
    # truncated completions left out; at sequence level the gradient under the 3 soft loss types and cispo's clip
    # statistic; the gradient under TRL's entropy mask; contract 7's delta at sequence level, the mask in
    # bfloat16, vespo's extremes at sequence level, the two reward checks under normalize_then_sum and in groups of
    # 8, and the entropy bonus's gradient; contract 8's partition with the weights moving and the reward model's
    # run under normalize_then_sum, the short windows' gradient under the 7 loss types but the default, and the
    # forward recompute on left-padded prompts, the two reward checks with the functions in another order, and the
    # entropy bonus under the entropy mask; contract 9's learning-rate schedule and dr_grpo's short completions;
    # contract 10's windows across generations; contract 13's off-policy sequence mask and the entropy bonus's two
    # runs under adaptive control
    assert len(cases("grpo")) == (16 + 7 + 6 + 8 + 1 + 5 + 2 + 6 + 4 + 1 + 1 + 2 + 2 + 1 + 1 + 2 + 4 + 4 + 1
                                  + 3 + 2 + 2 + 1 + 2 + 7 + 1 + 2 + 1 + 1 + 1 + 1 + 1 + 2) == 101  # fmt: skip


def test_verify_reference_grpo_exits_0_and_a_bad_setting_exits_2(tmp_path):
    code, report, output = verify(tmp_path, "--target", "reference-grpo", "--check", "short_window")
    assert code == 0, output[-2000:]
    assert report["algorithm"] == "grpo" and [c["id"] for c in report["checks"]] == ["short_window"]
    code, _, output = verify(tmp_path, "--target", "reference-grpo", "--set", "kl_coef=0.1")
    assert code == 2 and "KEY one of" in output


def test_the_reference_grpo_trainer_passes_every_check_of_the_gate():
    """The whole GRPO gate (`python -m harness verify --target reference-grpo`'s checks, in process; the session's
    runs shared with the modules that read the same scenarios)."""
    report = gate("reference-grpo")
    assert report["algorithm"] == "grpo" and len(report["checks"]) == len(cases("grpo"))
    failed = [f"{c['id']}: {c['message']}" for c in report["checks"] if c["status"] != "pass"]
    assert report["status"] == "pass" and not failed, failed


def test_policy_loss_not_logged_at_all_is_noted_but_missing_from_one_log_fails(reference_cache):
    """TRL logs policy_loss only with an entropy bonus: a trainer that never logs it is not wrong; one that logs
    it in some intervals only is."""
    obs = reference_cache.get(scenarios.spec_for(scenarios.UNEVEN, GRPOSpec()), spy=False)
    never, records = [{k: v for k, v in log.items() if k != "policy_loss"} for log in obs.ran.logs], recorded(obs.ran)
    result = grpo_check(
        "uneven_lengths[loss_type=dapo]", FixedCache(lambda spec: Observation(spec, ran(never, records.loss_inputs)))
    )
    assert result.passed and "policy_loss is not logged" in result.message
    once = [never[0], *obs.ran.logs[1:]]
    result = grpo_check(
        "uneven_lengths[loss_type=dapo]", FixedCache(lambda spec: Observation(spec, ran(once, records.loss_inputs)))
    )
    assert not result.passed and "never logged policy_loss" in result.message


def test_each_loss_type_is_held_to_its_own_metrics_and_the_clip_checks_to_a_clipped_one():
    from harness.algorithms.grpo import contract, runs
    from harness.algorithms.grpo.scenarios import pooled as scenarios

    assert "cispo_clip_ratio" in contract.pooled_names(0.0, "cispo")
    assert not any(n.startswith("clip_ratio/") for t in ("cispo", "sapo", "vespo")
                   for n in contract.pooled_names(0.04, t))  # fmt: skip
    assert "vespo/phi_seq_mean" in contract.pooled_names(0.0, "vespo")
    assert "policy_loss" not in contract.partition_names(0.0, "bnpo")  # a mean of micro-batch means, by definition
    assert contract.lr0_identities("vespo") == {"vespo/phi_seq_mean": 1.0}
    # `--set loss_type=sapo` still runs the clip extremes, under a loss type that clips
    assert scenarios.clipping(GRPOSpec(loss_type="sapo")).loss_type == GRPOSpec().loss_type
    assert scenarios.clipping(GRPOSpec(loss_type="luspo")).loss_type == "luspo"
    assert scenarios.off_policy_spec(GRPOSpec(), "cispo").epsilon_high == runs.CISPO_CAP
    assert scenarios.off_policy_spec(GRPOSpec(epsilon_high=5.0), "cispo").epsilon_high == 5.0


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "vespo"])
def test_off_policy_fails_when_its_ratios_never_left_1(reference_cache, loss_type):
    """The same runs at LR 0: every ratio is 1, cispo's weights all on one side of the cap, vespo's phi 1; the check
    saw nothing off policy and fails saying so, though every metric equals the oracle's."""
    at_lr0 = FixedCache(lambda spec: reference_cache.get(spec.with_(learning_rate=0.0), spy=False))
    result = grpo_check(f"off_policy[loss_type={loss_type}]", at_lr0)
    assert not result.passed and "every ratio within 0 of 1" in result.message, result.message
    assert grpo_check(f"off_policy[loss_type={loss_type}]", reference_cache).passed
