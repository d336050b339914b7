"""The `verl` target (harness/algorithms/grpo/targets/verl, docs/verl.md): verl 0.9.1's own GRPO update on the CPU.

The main test venv has no verl (its extra pins a transformers below the suite's): what needs it is skipped there
and runs in a venv with the `verl` extra and pytest (`nox -s verl` makes one; pytest is not in the extra).
What runs everywhere: the target's registration and declarations, which specs it refuses and why, and its one-line
refusal (exit 2, naming the extra) where verl cannot be imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from harness.algorithms.grpo.runs import LR_SCHEDULE, SHORT, UNEVEN
from harness.algorithms.grpo.targets.verl import NOT_APPLICABLE, build, config
from harness.errors import HarnessConfigError
from harness.targets import resolve

HAS_VERL = importlib.util.find_spec("verl") is not None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))))
BASELINE = os.path.join(ROOT, "baselines", "verl-0.9.1-grpo.toml")

# The verdict on verl 0.9.1 (docs/verl.md, "The verdict"): what fails, and what passes.
VERL_FAILS = {
    *(f"uneven_lengths[loss_type={t}]" for t in ("grpo", "dr_grpo", "sapo")),
    "off_policy[loss_type=cispo]",  # actor/pg_clipfrac under cispo, a flat mean of micro-batch means (class 16)
    "off_policy[loss_type=sapo]",
    "extremes",  # actor/pg_clipfrac, a flat mean of micro-batch means (class 16): a finding
    "extremes[run=clip_asymmetric]",  # the same, at clip bounds 0.05 and 0.6
    "partition",  # at LR 0 kl_loss and pg_loss, means of mini-batch aggregates, move with the mini-batch count
    "partition[dropout=0.1]",  # dropout acts in the update (class 43): tokens clipped at LR 0
    "partition[run=clipping]",  # the same clip fraction moves with ppo_micro_batch_size_per_gpu alone: a finding
    "all_masked", "empty_interval",  # verl's response mask empties no completion, so neither has what it needs
    "advantages[scale_rewards=group]", "advantages[scale_rewards=none]",
    "reward_stats[scale_rewards=group]", "reward_stats[scale_rewards=none]", "reward_stats[run=small_groups]",
    "advantages[num_generations=8]", "reward_stats[num_generations=8]",
}  # fmt: skip
VERL_PASSES = {
    # the step's gradient does not depend on the micro-batch cut
    *(f"gradient_partition[loss_type={t}]" for t in ("grpo", "dr_grpo", "dapo", "cispo", "sapo")),
    "reward_inputs", "completion_mask", "forward_recompute", "sampling", "optimizer_step",
    # the old log-prob pass's entropies, their token mean (declared: entropy_pass) and their float64 formula
    "uneven_lengths[loss_type=dapo]", "logit_recompute",
    # every token capped at epsilon_high 0.2, counted whatever its advantage's sign (declared: cispo_clip_population)
    "uneven_lengths[loss_type=cispo]",
    # beta 0, four optimizer steps logged once, per generation (declared: logging_cadence)
    "no_kl",
    # response_length/clip_ratio counts the completions at max_response_length (declared: truncation)
    "completion_lengths",
    # the gradient at the log-probs, with verl's declared KL clamp, KL weighting, dual clip and token-mean scope
    *(f"logp_gradient[loss_type={t}]" for t in ("grpo", "dr_grpo", "dapo", "cispo", "sapo")),
    *(f"logp_gradient[run=off_policy,loss_type={t}]" for t in ("cispo", "sapo")),
    "logp_gradient[run=beta0]", "logp_gradient[run=kl_uncorrected]", "logp_gradient[run=on_the_fly]",
    "logp_gradient[run=extremes]", "logp_gradient[run=clip_asymmetric]",
    "logp_gradient[run=short_completions]",  # seq-mean-token-sum-norm at loss_scale_factor = max_completion_length
    "logp_gradient[run=single_completion,loss_type=grpo]", "logp_gradient[run=single_completion,loss_type=dr_grpo]",
    "reward_stats[run=one_function]",  # the reward's mean: the statistics verl does not log are declared so
}  # fmt: skip


def test_verl_is_a_grpo_target_with_its_extra_and_verls_definitions():
    target = resolve("verl")  # every not_applicable key names a check of the GRPO gate, or this raises
    assert target.algorithm == "grpo" and target.extras == ("verl",)
    assert target.definition("advantage_epsilon") == 1e-6  # verl's profile
    assert target.definition("partial_last_interval") == "logged"
    assert target.definition("token_mean_scope") == "window"  # agg_loss's token-mean over the mini-batch's tokens
    assert target.definition("policy_loss_includes_kl") is False  # ppo_loss logs pg_loss before it adds the KL
    assert target.definition("metric_pooling") == "window_mean"  # reduce_metrics' mean of each mini-batch's own
    assert target.definition("kl_population") == "as_loss"  # ppo_loss: agg_loss of k3 with the loss_agg_mode
    assert target.definition("entropy_pass") == "before_update"  # fit: agg_loss of _compute_old_log_prob's entropys
    assert target.definition("logging_cadence") == "generation"  # fit: logger.log once per training step
    assert target.definition("cispo_clip_population") == "any_advantage"  # ratio != clamp(ratio), either sign
    assert target.optional_metrics == ("policy_loss",)
    assert {"clip_ratio/low_min", "reward_std", "rewards/*/std"} <= set(target.unlogged_metrics)
    assert dict(target.not_applicable) == NOT_APPLICABLE


def test_the_specs_verl_cannot_run_are_refused_with_the_reason():
    assert config.refusal(UNEVEN) is None
    assert "whole mini-batches" in config.refusal(SHORT)  # 3 + 1 micro-batches per generation
    assert "to its end" in config.refusal(UNEVEN.with_(max_steps=3))  # stops in a training step of 2
    for loss_type in ("bnpo", "luspo", "vespo"):
        assert f"no {loss_type!r} loss" in config.refusal(UNEVEN.with_(loss_type=loss_type))
    assert "std" in config.refusal(UNEVEN.with_(scale_rewards="batch"))
    assert "delta" in config.refusal(UNEVEN.with_(delta=2.0))
    assert "no entropy mask" in config.refusal(UNEVEN.with_(top_entropy_quantile=0.2))
    adam = UNEVEN.with_(adam_beta1=0.8, adam_beta2=0.99, adam_epsilon=1e-6)
    assert "Adam settings" in config.refusal(adam) and "Adam settings" in config.refusal(LR_SCHEDULE)
    for loss_type in ("grpo", "dr_grpo", "dapo", "cispo", "sapo"):
        assert config.refusal(UNEVEN.with_(loss_type=loss_type)) is None


def test_cispos_cap_is_verls_clamp_with_no_lower_bound():
    """TRL's cispo weight min(r, epsilon_high) is verl's clamp(r, 1 - low, 1 + high) at low 1, high epsilon_high - 1;
    the other loss types keep the spec's bounds."""
    assert config.clip_ratios(UNEVEN.with_(loss_type="cispo", epsilon_high=5.0)) == (1.0, 4.0)
    assert config.clip_ratios(UNEVEN.with_(epsilon_low=0.05, epsilon_high=0.6)) == (0.05, 0.6)


def test_without_verl_building_a_run_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)  # `import verl` raises ImportError, as where it is not installed
    with pytest.raises(HarnessConfigError, match=r"verl is not installed .*ppo-stats-harness\[verl\]"):
        build(UNEVEN)


@pytest.mark.skipif(HAS_VERL, reason="verl is installed: the command runs the gate")
def test_without_verl_the_gate_exits_2_in_one_line():
    done = subprocess.run([sys.executable, "-m", "harness", "verify", "--target", "verl"], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "ppo-stats-harness[verl]" in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not HAS_VERL, reason="needs verl 0.9.1 (`nox -s verl`)")
def test_verls_verdict_is_pinned_by_its_baseline(tmp_path):
    """The gate on verl 0.9.1: exit 1, the failures and passes above, the rest not applicable with their reasons,
    class 16 named on actor/pg_clipfrac (under cispo too, its population declared) and that it depends on the
    micro-batch size (the entropy, kl and policy loss not), kl and policy_loss passing with
    verl's metric_pooling and kl_population, the entropy with its entropy_pass where verl aggregates it as a token
    mean, and diagnosed as the loss type's aggregate (the finding of verl issue 3986) where it does not; with the
    baseline, exit 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "harness", "verify", "--target", "verl",
                           "--report-dir", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=1800)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.load(open(tmp_path / "verify.json", encoding="utf-8"))
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert {i for i, s in status.items() if s == "fail"} == VERL_FAILS
    assert {i for i, s in status.items() if s == "pass"} == VERL_PASSES
    reasons = set(NOT_APPLICABLE.values())
    assert all(c["message"] in reasons for c in report["checks"] if c["status"] == "not_applicable")
    (extremes,) = [c for c in report["checks"] if c["id"] == "extremes"]
    (clipfrac,) = [m for m in extremes["metrics"] if m["name"] == "clip_ratio/region_mean"]
    assert clipfrac["diagnosis"]["class"] == 16
    # with the weights moving, at one mini-batch size, the micro-batch size alone moves it
    (clipping,) = [c for c in report["checks"] if c["id"] == "partition[run=clipping]"]
    said = [d["formula"] for d in clipping["diagnoses"]]
    assert said == ["clip_ratio/region_mean depends on the micro-batch size (4 -> 2)"], said
    # under cispo, every capped token counted (declared: cispo_clip_population), pooled as a flat mean: class 16 still
    (cispo,) = [c for c in report["checks"] if c["id"] == "off_policy[loss_type=cispo]"]
    cispo_clip = [m for m in cispo["metrics"] if m["name"] == "cispo_clip_ratio" and m["status"] == "fail"]
    assert cispo_clip and all(m["diagnosis"]["class"] == 16 for m in cispo_clip)
    # kl_loss and pg_loss: the mean over mini-batches of each one's aggregate, kl_loss the loss's, as declared
    for check in (*(f"uneven_lengths[loss_type={t}]" for t in ("grpo", "dr_grpo", "dapo", "cispo", "sapo")),
                  "off_policy[loss_type=sapo]", "extremes"):  # fmt: skip
        (pooled,) = [c for c in report["checks"] if c["id"] == check]
        loss_metrics = [m["status"] for m in pooled["metrics"] if m["name"] in ("kl", "policy_loss")]
        assert loss_metrics and set(loss_metrics) == {"pass"}, check
    entropy = {c["id"]: next(m for m in c["metrics"] if m["name"] == "entropy") for c in report["checks"]
               if any(m["name"] == "entropy" for m in c.get("metrics") or ())}  # fmt: skip
    for check in ("uneven_lengths[loss_type=dapo]", "uneven_lengths[loss_type=cispo]", "off_policy[loss_type=cispo]",
                  "extremes", "extremes[run=clip_asymmetric]"):  # token-mean: agg_loss is the token mean
        assert entropy[check]["status"] == "pass", check
    seq_mean = (*(f"uneven_lengths[loss_type={t}]" for t in ("grpo", "dr_grpo", "sapo")), "off_policy[loss_type=sapo]")
    for check in seq_mean:
        assert "verl issue 3986" in entropy[check]["diagnosis"]["formula"], check  # seq-mean: the finding
    pinned = subprocess.run([sys.executable, "-W", "ignore", "-m", "harness", "verify", "--target", "verl",
                             "--report-dir", str(tmp_path / "pinned"), "--baseline", BASELINE], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=1800)  # fmt: skip
    assert pinned.returncode == 0, pinned.stdout[-3000:]
