"""The `openrlhf` target (harness/algorithms/grpo/targets/openrlhf, docs/openrlhf.md): OpenRLHF 0.11.2's own GRPO actor
update on the CPU.

The main test venv has no openrlhf nor deepspeed (openrlhf installs only with --no-deps, its flash-attn pin builds
only with CUDA): what needs them is skipped there and runs in `nox -s openrlhf`'s venv, which has the `test` extra.
What runs everywhere: the target's registration and declarations, which specs it refuses and why, the placeholder
modules (put only where the real module is missing), and its one-line refusal (exit 2, naming the extra) where
openrlhf cannot be imported, leaving the process as it was.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.algorithms.grpo.runs import LR_SCHEDULE, SHORT, UNEVEN
from harness.algorithms.grpo.targets.openrlhf import build, config, platform
from harness.errors import HarnessConfigError
from harness.targets import resolve

HAS_OPENRLHF = all(importlib.util.find_spec(name) is not None for name in ("openrlhf", "deepspeed"))
ROOT = Path(__file__).resolve().parents[5]
BASELINE = str(ROOT / "baselines" / "openrlhf-0.11.2-grpo.toml")

# The verdict on OpenRLHF 0.11.2 (docs/openrlhf.md, "The verdict"): what fails, and what passes.
OPENRLHF_FAILS = {
    # policy_loss, kl and entropy_loss logged as window shares weighted by tokens (class 19): a finding
    "uneven_lengths[loss_type=grpo]", "uneven_lengths[loss_type=dapo]", "extremes", "extremes[run=clip_asymmetric]",
    "partition", "partition[dropout=0.1]",  # the same at LR 0 (the cut 3+1 noted, not run); dropout acts (class 43)
    "partition[run=clipping]",  # the same, seen from outside: they move with --train.micro_batch_size alone
    "logp_gradient[loss_type=grpo]",  # the KL term a token mean under seq-mean-token-mean: not yet declarable
    "all_masked", "empty_interval",  # no all-masked micro-batch, no empty generation under this target's mask
    "advantages[scale_rewards=group]", "advantages[scale_rewards=none]",  # this target's reward (class 50)
    "reward_stats[scale_rewards=group]", "reward_stats[scale_rewards=none]", "reward_stats[run=small_groups]",
    "advantages[num_generations=8]", "reward_stats[num_generations=8]",  # the same, in groups of 8
}  # fmt: skip
OPENRLHF_PASSES = {
    *(f"gradient_partition[loss_type={t}]" for t in ("grpo", "dapo")),
    *(f"logp_gradient[{run}]" for run in ("loss_type=dapo", "run=beta0", "run=extremes", "run=clip_asymmetric",
                                          "run=on_the_fly", "run=single_completion,loss_type=grpo")),
    "reward_inputs", "completion_mask", "completion_lengths", "forward_recompute", "logit_recompute", "sampling",
    "optimizer_step", "reward_stats[run=one_function]",
    "no_kl",  # beta 0, four optimizer steps logged once, per training step (declared: logging_cadence generation)
}  # fmt: skip


def verify(report_dir: Path, *args: str, timeout: float = 1800) -> tuple[int, dict, str]:
    """`python -m harness verify --report-dir REPORT_DIR ARGS`: (exit code, verify.json or {}, its output). Not
    tests.support.gate_run's: openrlhf's wheel installs a top-level package `tests` that shadows this project's."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "harness", "verify", "--report-dir", str(report_dir),
                           *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)  # fmt: skip
    path = report_dir / "verify.json"
    return done.returncode, json.loads(path.read_text()) if path.exists() else {}, done.stdout + done.stderr


def test_openrlhf_is_a_grpo_target_with_its_extra_and_its_definitions():
    target = resolve("openrlhf")  # every not_applicable key names a check of the GRPO gate, or this raises
    assert target.algorithm == "grpo" and target.extras == ("openrlhf",)
    assert target.definition("advantage_epsilon") == 1e-9  # group_norm's std + 1e-9
    assert target.definition("kl_clamp") == 10.0 and target.definition("kl_importance_weighting") == "never"
    assert target.definition("token_mean_scope") == "window"  # iter_grad_accum_global_norm's window tokens
    assert target.definition("policy_loss_includes_kl") is False  # PolicyLoss's term; kl logged apart
    assert target.definition("metric_pooling") == "interval"  # nothing declared: its pooling is a finding
    assert target.definition("dual_clip_ratio") is None  # no --actor.dual_clip
    assert target.definition("kl_population") == "token_mean"  # aggregate_loss(kl, ...) at its token_level_loss default
    assert target.definition("entropy_pass") == "update"  # entropy_loss from training_step's own forward
    assert target.definition("logging_cadence") == "generation"  # save_logs_and_checkpoints per global_step
    assert target.optional_metrics == ("policy_loss",)
    assert {"clip_ratio/low_mean", "reward_std", "completions/max_length"} <= set(target.unlogged_metrics)
    assert dict(target.not_applicable) == build.not_applicable


def test_the_specs_openrlhf_cannot_run_are_refused_with_the_reason():
    assert config.refusal(UNEVEN) is None and config.refusal(UNEVEN.with_(loss_type="grpo")) is None
    assert "carry its gradient" in config.refusal(SHORT)  # 3 + 1 micro-batches per generation
    assert "inside a training step" in config.refusal(UNEVEN.with_(max_steps=3))
    for loss_type in ("bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"):
        assert f"no {loss_type!r} loss" in config.refusal(UNEVEN.with_(loss_type=loss_type))
    assert "batch-wide" in config.refusal(UNEVEN.with_(scale_rewards="batch"))
    assert "delta" in config.refusal(UNEVEN.with_(delta=2.0))
    assert "no entropy mask" in config.refusal(UNEVEN.with_(top_entropy_quantile=0.2))
    assert "gspo" in config.refusal(UNEVEN.with_(importance_sampling_level="sequence"))
    assert "before summing" in config.refusal(UNEVEN.with_(multi_objective_aggregation="normalize_then_sum"))
    adam = UNEVEN.with_(adam_beta1=0.8, adam_beta2=0.99, adam_epsilon=1e-6)
    assert "Adam settings" in config.refusal(adam) and "Adam settings" in config.refusal(LR_SCHEDULE)


def test_the_arguments_are_openrlhfs_names_for_the_spec():
    args = config.arguments(UNEVEN.with_(loss_type="grpo", beta=0.04, epsilon_low=0.1, epsilon_high=0.3))
    assert args.actor.loss_agg_mode == "seq-mean-token-mean" and args.actor.eps_clip_low_high == (0.1, 0.3)
    assert (args.algo.kl.use_loss, args.algo.kl.init_coef, args.algo.kl.estimator) == (True, 0.04, "k3")
    assert args.train.batch_size == UNEVEN.per_device_train_batch_size * UNEVEN.gradient_accumulation_steps
    assert args.algo.advantage.estimator == "group_norm" and args.actor.entropy_coef == 0.0
    assert config.arguments(UNEVEN.with_(scale_rewards="none")).algo.advantage.estimator == "dr_grpo"
    assert config.arguments(UNEVEN.with_(beta=0.0)).algo.kl.use_loss is False


def test_placeholders_take_only_the_names_of_missing_modules(monkeypatch):
    monkeypatch.setattr(platform, "PLACEHOLDERS", {"json": ("json.decoder",), "no_such_top": ("no_such_top.sub",)})
    monkeypatch.delitem(sys.modules, "no_such_top", raising=False)
    monkeypatch.delitem(sys.modules, "no_such_top.sub", raising=False)
    try:
        assert platform.placeholders() == ("no_such_top", "no_such_top.sub")  # json is real: left alone
        from no_such_top.sub import anything

        with pytest.raises(RuntimeError, match=r"no_such_top\.sub\.anything: a placeholder"):
            anything()
        with pytest.raises(ImportError):  # no submodule but those named: OpenRLHF's try/except ImportError falls back
            import no_such_top.other  # noqa: F401
    finally:
        for name in ("no_such_top", "no_such_top.sub"):
            sys.modules.pop(name, None)


def test_without_openrlhf_building_a_run_is_one_line_naming_the_extra(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setitem(sys.modules, "openrlhf", None)  # `import openrlhf` raises ImportError, as where not installed
    was_initialized = dist.is_initialized()
    with pytest.raises(HarnessConfigError, match=r"openrlhf is not installed .*ppo-stats-harness\[openrlhf\]"):
        build(UNEVEN)
    assert dist.is_initialized() == was_initialized  # nothing of the process set up before the refusal


@pytest.mark.skipif(HAS_OPENRLHF, reason="openrlhf is installed: the command runs the gate")
def test_without_openrlhf_the_gate_exits_2_in_one_line(tmp_path):
    code, _, output = verify(tmp_path, "--target", "openrlhf", timeout=600)
    assert code == 2
    assert output.strip().count("\n") == 0 and "nox -s openrlhf" in output


@pytest.mark.slow
@pytest.mark.skipif(not HAS_OPENRLHF, reason="needs openrlhf 0.11.2 and deepspeed (`nox -s openrlhf`)")
def test_openrlhfs_verdict_is_pinned_by_its_baseline(tmp_path):
    """The gate on OpenRLHF 0.11.2: exit 1, the failures and passes above, the rest not applicable with their reasons,
    its clip fraction passing where its loss metrics fail, named class 19 (window shares weighted by tokens); with the
    baseline, exit 0."""
    code, report, output = verify(tmp_path, "--target", "openrlhf")
    assert code == 1, output[-3000:]
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert {i for i, s in status.items() if s == "fail"} == OPENRLHF_FAILS
    assert {i for i, s in status.items() if s == "pass"} == OPENRLHF_PASSES
    reasons = set(build.not_applicable.values())
    assert all(c["message"] in reasons for c in report["checks"] if c["status"] == "not_applicable")
    (dapo,) = [c for c in report["checks"] if c["id"] == "uneven_lengths[loss_type=dapo]"]
    by_name = {m["name"]: m["status"] for m in dapo["metrics"]}
    assert {by_name[n] for n in ("policy_loss", "kl", "entropy")} == {"fail"}  # the window shares (class 19)
    for check in ("uneven_lengths[loss_type=grpo]", "uneven_lengths[loss_type=dapo]", "extremes"):
        (pooled,) = [c for c in report["checks"] if c["id"] == check]
        shares = [m for m in pooled["metrics"] if m["name"] in ("policy_loss", "kl", "entropy")]
        assert shares and all((m["diagnosis"] or {}).get("class") == 19 for m in shares), check  # named, by tokens
    assert by_name["clip_ratio/region_mean"] == "pass"  # ppo_clip_ratio, a masked_mean per micro-batch: a token mean
    code, _, output = verify(tmp_path / "pinned", "--target", "openrlhf", "--baseline", BASELINE)
    assert code == 0, output[-3000:]
