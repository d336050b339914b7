"""The GRPO gate's verdict on TRL 1.12.0's GRPOTrainer, and how each failure comes about.

One `python -m harness verify --target trl-grpo` run as a user would (a subprocess, its exit
code, its JSON report) pins which checks fail; in-process runs of the same scenarios reproduce
the logged numbers with the known wrong poolings of `harness.algorithms.grpo.wrong.poolings`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re

import pytest

from harness.algorithms.grpo.spec import LOSS_TYPES
from tests.docs import documented
from tests.support import forked

pytestmark = pytest.mark.trl

# What trl 1.12.0 gets wrong, by check id (README "The GRPO gate on TRL 1.12.0", docs/trl-grpo.md "The verdict").
TRL_GRPO_FAILS = {
    # token means logged as a flat mean of micro-batch means (class 16), extremes as a mean of micro-batch
    # extremes (class 18)
    *(f"uneven_lengths[loss_type={t}]" for t in LOSS_TYPES),
    *(f"off_policy[loss_type={t}]" for t in ("cispo", "sapo", "vespo")),  # the same, ratios far from 1
    "short_window",
    "extremes",
    "freshness",
    "all_masked",  # an empty micro-batch's means enter as 0
    "partition",
    # and, with attention dropout in the models, tokens clipped at LR 0: disable_dropout sets p = 0 on nn.Dropout
    # modules only, and the Trainer trains in train mode, so Llama's functional attention dropout acts (class 43)
    "partition[dropout=0.1]",
    "partition[run=clipping]",
    # under batch scaling frac_reward_zero_std tests the batch's reward std, not each group's
    "reward_stats[scale_rewards=batch]",
    # its whole intervals' token means, pooled as in uneven_lengths (classes 16, 18); the partial last interval it
    # leaves unlogged, as its definitions allow (partial_last_interval 'optional': transformers' Trainer)
    "schedule",
    # the same poolings in the extremes geometry under sequence-level ratios and under clip bounds 0.05 and 0.6:
    # its flags, one per completion or at its own bounds, are right (classes 16, 18); cispo's at sequence level
    # too (each micro-batch's mean over its 4 rows: their flat mean is the mean over completions), its entropy and
    # kl not (class 16); vespo's phi_seq_mean at sequence level is right, its entropy and kl are not (class 16)
    "extremes[run=sequence_level]",
    "extremes[run=clip_asymmetric]",
    "extremes[run=sequence_level,loss_type=cispo]",
    "extremes[run=sequence_level,loss_type=vespo]",
    # its entropy bonus is each micro-batch's own mean entropy over the accumulation steps (_compute_loss), not the
    # window's mean its docs define: off where a window's micro-batches hold unequal token counts (class 82); its
    # gradient at the log-probs, in the same run, is right
    "entropy_gradient",
    "entropy_gradient[run=top_entropy]",  # the same under the entropy mask (class 82)
    # and under adaptive entropy control, each window's coefficient the contract's (class 82)
    "entropy_gradient[run=adaptive]",
}
HALF_PRECISION_NOT_APPLICABLE = {"partition[run=clipping]"}
"""The failing checks that cannot judge in half precision (scenarios/cuts.py, HALF): the update's rounding follows the
micro-batch's shape under TRL's mixed precision too, and the weights moving carry it into every ratio."""
TRL_GRPO_PASSES = {
    "optimizer_step",  # torch's AdamW, each step its own update of the recorded weights and gradient
    *(f"gradient_partition[loss_type={t}]" for t in LOSS_TYPES if t != "bnpo"),
    "every_microbatch_applied",
    "every_microbatch_applied[max_grad_norm=0.05]",  # its clipping is the norm's
    "logit_recompute",  # its per-token log-probs and entropies are right; only their pooling is not
    # an interval without a token logs 0 token means (the extremes it leaves out are noted), and no `kl` at beta 0
    "empty_interval",
    "no_kl",
    # the gradient at the log-probs is the formula's for all eight loss types (TRL PR 6024 scales dapo's count to
    # the window; bnpo is normalised by each micro-batch's own tokens, as TRL documents it), with beta 0, without
    # the KL's bias correction, with tokens clipped, windows of one row and cispo, sapo, vespo off policy
    *(f"logp_gradient[loss_type={t}]" for t in LOSS_TYPES),
    *(f"logp_gradient[run=off_policy,loss_type={t}]" for t in ("cispo", "sapo", "vespo")),
    *(f"logp_gradient[run={r}]" for r in ("short_window", "extremes", "beta0", "kl_uncorrected", "delta")),
    *(f"logp_gradient[run=single_completion,loss_type={t}]" for t in ("grpo", "dr_grpo")),
    # windows 3+1 under every loss type: each window divided by its own count (the short one's too)
    *(f"logp_gradient[run=short_window,loss_type={t}]" for t in LOSS_TYPES if t != "dapo"),
    "logp_gradient[run=on_the_fly]",  # its old log-probs, where it stores none, are the current ones detached
    "logp_gradient[run=clip_asymmetric]",  # its clamp takes [1 - epsilon, 1 + epsilon_high], each bound on its side
    "logp_gradient[run=sequence_level]",  # GSPO: each token's gradient through its completion's mean log-ratio
    # and cispo's weight, sapo's gate and vespo's KL correction of the completion's ratio at sequence level
    *(f"logp_gradient[run=sequence_level,loss_type={t}]" for t in ("cispo", "sapo", "vespo")),
    # top_entropy_quantile 0.2: the policy term at each micro-batch's tokens at or above its 0.8 entropy quantile
    # (gathered across processes, get_high_entropy_mask), the KL term added after the mask on every token
    "logp_gradient[run=top_entropy]",
    "logp_gradient[run=top_entropy,dtype=bfloat16]",  # the same with its entropies in bfloat16 (its quantile float32)
    # off_policy_mask_threshold 2.0: get_off_policy_mask drops a completion of negative advantage whose mean
    # old_logp - logp exceeds it, and _compute_loss masks the policy term before it adds the KL term
    "logp_gradient[run=off_policy_mask]",
    # adaptive entropy control holding the bonus off at every window (the gate shut): no gradient at the entropies
    "entropy_gradient[run=adaptive_gated]",
    "logp_gradient[run=delta,importance_sampling_level=sequence]",  # delta caps the completion's ratio, coef_1
    # dr_grpo divides by max_completion_length, not by the width it pads a generation to (its longest completion)
    "logp_gradient[run=short_completions]",
    "logp_gradient[run=across_generations]",  # each micro-batch divided by its own generation's num_items_in_batch
    "lr_schedule",  # transformers' scheduler, stepped once per optimizer step; its param groups decay all but biases
    "completion_mask[mask_truncated_completions=True]",  # every truncated completion's mask empty
    # its advantages are right (weights, Bessel-corrected stds, unscorable completions), and its reward statistics
    # where it tests each group's std
    *(f"advantages[scale_rewards={s}]" for s in ("group", "batch", "none")),
    # under multi_objective_aggregation='normalize_then_sum' too: each function normalised in its group first
    "advantages[multi_objective_aggregation=normalize_then_sum]",
    "reward_stats[multi_objective_aggregation=normalize_then_sum]",
    "advantages[num_generations=8]",  # and in groups of 8
    # the functions handed over the other way round than their names sort: TRL pairs weights with them by place
    "advantages[reward_order=reversed]",
    "reward_stats[reward_order=reversed]",
    "reward_stats[num_generations=8]",
    "reward_stats[scale_rewards=group]",
    "reward_stats[scale_rewards=none]",
    # per group of four (its NaN statistics over too few scores dropped: noted) and with one function, no weights
    "reward_stats[run=small_groups]",
    "reward_stats[run=one_function]",
    # its completion lengths, clipped ratio and terminated lengths, at seed 0; at seed 6 one completion ends with
    # a sampled pad and TRL counts it as terminated (test_trl_grpo_counts_a_completion_ending_in_pad_as_terminated)
    "completion_lengths",
    # its masks run to the first EOS (a pad drawn before it included), its log-probs and entropies are its own
    # networks', each group's completions one prompt's, its tokens drawn from the policy at the temperature, and
    # each reward function is given the completion its score is assigned to
    "completion_mask",
    "forward_recompute",
    "forward_recompute[prompt_pads=3]",  # on left-padded prompts of 3 to 6 real tokens (it pads them itself)
    "sampling",
    "reward_inputs",
    # its reward model (handed in `reward_funcs` with the toy tokenizer) scores each prompt and completion as
    # decoded text at its last token
    "reward_model",
    "reward_model[multi_objective_aggregation=normalize_then_sum]",  # each weight meets a normalised score
}
REL = 1e-6


def _trl_grpo_available() -> bool:
    try:
        return importlib.util.find_spec("trl") is not None and bool(
            importlib.util.find_spec("trl.trainer.grpo_trainer")
        )
    except ImportError:
        return False


def verdict_at(tmp_path_factory, line: str):
    """One run of `line`, a `python -m harness verify --target trl-grpo ...` command of the docs (word for word as
    tests/docs/documented.py registers it for this module, a report folder appended): (exit code, verify.json, its
    output)."""
    if not _trl_grpo_available():
        if os.environ.get("CI"):
            pytest.fail("trl==1.12.0 is not installed in CI's test session (nox -s tests installs the trl extra)")
        pytest.skip("trl is not installed: pip install 'ppo-stats-harness[trl]'")
    out = tmp_path_factory.mktemp("verify-trl-grpo")
    proc = forked.run(
        [*documented.argv(line, __file__)[1], "--report-dir", str(out)],
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    report = json.loads((out / "verify.json").read_text()) if (out / "verify.json").exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def trl_grpo_verdict(tmp_path_factory):
    return verdict_at(tmp_path_factory, "python -m harness verify --target trl-grpo")


def diagnoses(report) -> dict[str, set]:
    """check id -> {(failing metric, its diagnosis's classes or None)} of the failing checks."""
    out = {}
    for check in report["checks"]:
        if check["status"] == "fail":
            out[check["id"]] = {(m["name"], tuple(m["diagnosis"]["classes"]) if m["diagnosis"] else None)
                                for m in check["metrics"] if m["failed"]}  # fmt: skip
    return out


@pytest.mark.slow
def test_trl_grpo_at_its_bfloat16_default_fails_the_same_checks_with_the_same_diagnoses(trl_grpo_verdict,
                                                                                      tmp_path_factory):  # fmt: skip
    """TRL's GRPOConfig trains under bf16=True by default; its per-token values stay float32 there, so the
    tolerances derived from them are float32's and the flat means of micro-batch means fail as at float32, each
    named. (The partition check compares one run's log with another's by the table's bfloat16 row: its entropy
    passes there; the check fails on kl, as at float32.) partition[run=clipping] is not applicable there, with its
    reason: with the weights moving, the update's rounding follows the micro-batch's shape."""
    code, report, output = verdict_at(tmp_path_factory, "python -m harness verify --target trl-grpo --dtype bfloat16")
    assert code == 1 and report["dtype"] == "bfloat16", output[-3000:]
    at_bf16, at_f32 = diagnoses(report), diagnoses(trl_grpo_verdict[1])
    assert set(at_f32) == TRL_GRPO_FAILS and set(at_bf16) == TRL_GRPO_FAILS - HALF_PRECISION_NOT_APPLICABLE
    half = {c["id"]: c for c in report["checks"] if c["id"] in HALF_PRECISION_NOT_APPLICABLE}
    assert all(c["status"] == "not_applicable" and "half precision" in c["message"] for c in half.values()), half
    for check_id in TRL_GRPO_FAILS - {"partition"} - HALF_PRECISION_NOT_APPLICABLE:
        named = lambda found: {(m, c) for m, c in found if c is not None}  # noqa: E731
        assert named(at_bf16[check_id]) == named(at_f32[check_id]), check_id
    assert at_bf16["partition"] == {("kl", None)}
    entropy = [m for c in report["checks"] if c["id"] == "uneven_lengths[loss_type=dapo]" for m in c["metrics"]
               if m["name"] == "entropy" and m["failed"]]  # fmt: skip
    assert entropy and all(m["precision"]["dtype"] == "float32" for m in entropy)


@pytest.mark.slow
def test_trl_grpo_exits_1_and_fails_exactly_the_expected_checks(trl_grpo_verdict):
    code, report, output = trl_grpo_verdict
    assert code == 1, output[-3000:]
    assert report["target"] == "trl-grpo" and report["status"] == "fail"
    got = {check["id"]: check["status"] for check in report["checks"]}
    assert {c for c, s in got.items() if s == "fail"} == TRL_GRPO_FAILS
    assert {c for c, s in got.items() if s == "pass"} == TRL_GRPO_PASSES


@pytest.mark.slow
def test_each_trl_grpo_failure_is_one_line_with_logged_and_expected_values(trl_grpo_verdict):
    _, _, output = trl_grpo_verdict
    lines = {line.split()[1]: line for line in output.splitlines() if line.startswith("FAIL  ")}
    assert set(lines) == TRL_GRPO_FAILS
    for check_id, line in lines.items():
        if check_id.startswith("entropy_gradient"):  # a token's gradient, in words: recorded, and the formula's
            assert re.search(r"dL/dH recorded at .* is \S+ where the window mean's gives \S+", line), line
        else:
            assert re.search(r"logged=\S+ expected=\S+", line), line
    for check_id in ("uneven_lengths[loss_type=dapo]", "partition", "all_masked"):
        assert "entropy" in lines[check_id], lines[check_id]  # the first failure is a pooled token mean


@pytest.mark.slow
def test_trl_grpo_entropy_bonus_is_each_micro_batch_mean_over_the_steps(trl_grpo_verdict):
    """TRL documents its bonus as the mean per-token entropy; _compute_loss takes each micro-batch's own mean over
    the accumulation steps, so where a window's micro-batches hold unequal token counts its gradient at the
    entropies is not the window mean's, and that form reproduces it (class 82); its log-probs' gradient is right."""
    check = next(c for c in trl_grpo_verdict[1]["checks"] if c["id"] == "entropy_gradient")
    assert diagnoses(trl_grpo_verdict[1])["entropy_gradient"] == {("gradient/entropy_relative", (82,))}
    assert {m["name"]: m["failed"] for m in check["metrics"]} == {"gradient/entropy_relative": True,
                                                                   "gradient/logp_relative": False}


@pytest.mark.slow
def test_trl_grpo_bnpo_gradient_is_its_documented_local_batch_mean(trl_grpo_verdict):
    """TRL documents bnpo as normalised over the local batch's tokens; the contract holds it to that, so TRL passes
    (it failed when the contract asked for the window's token mean: a false alarm for a documented definition)."""
    _, report, _ = trl_grpo_verdict
    (check,) = [c for c in report["checks"] if c["id"] == "logp_gradient[loss_type=bnpo]"]
    assert check["status"] == "pass"
    assert "gradient_partition[loss_type=bnpo]" not in {c["id"] for c in report["checks"]}


@pytest.mark.slow
def test_trl_grpo_clips_tokens_at_lr0_only_with_dropout(trl_grpo_verdict):
    _, report, _ = trl_grpo_verdict
    checks = {c["id"]: c for c in report["checks"]}
    failed = {cid: {m["name"] for m in checks[cid]["metrics"] if m["failed"]} for cid in checks}
    assert failed["partition"] == {"entropy", "kl"}  # class 16 alone: no token clipped
    clip = {"clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/high_max"}
    assert clip <= failed["partition[dropout=0.1]"]


@pytest.fixture(scope="module")
def trl_runs():
    """The uneven_lengths and all_masked scenarios' TRL runs (seed 0): their logs and loss records."""
    if not _trl_grpo_available():
        pytest.skip("trl is not installed: pip install 'ppo-stats-harness[trl]'")
    from harness.algorithms.grpo import runs as scenarios
    from harness.algorithms.grpo.targets import trl
    from harness.algorithms.grpo.view import build_view

    out = {}
    for spec in (scenarios.UNEVEN, scenarios.ALL_MASKED):
        run = trl.build(spec)
        logs = run.train()
        out[spec.name] = (spec, logs, build_view(run.loss_inputs, spec).intervals)
    return out


TOKEN_MEANS = ("entropy", "kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")


@pytest.mark.parametrize("name", ["uneven_lengths", "all_masked"])
def test_trl_grpo_token_means_are_flat_means_of_micro_batch_means(trl_runs, name):
    from harness.algorithms.grpo.oracle.expect import expected_metrics
    from harness.algorithms.grpo.wrong.poolings import flat_mean_of_microbatch_means

    spec, logs, per_interval = trl_runs[name]
    departures = 0
    for log, interval in zip(logs, per_interval, strict=True):
        expected = expected_metrics(interval.records, spec)
        for metric in TOKEN_MEANS:
            flat = flat_mean_of_microbatch_means(interval.terms, metric)
            assert log[metric] == pytest.approx(flat, rel=REL, abs=1e-9), (metric, log[metric], flat)
            departures += abs(flat - expected[metric].value) > 1e-4 * (1 + abs(flat))
    assert departures >= 2  # entropy and kl at least: the pooling shows


def test_trl_grpo_empty_micro_batches_enter_token_means_as_zero(trl_runs):
    spec, logs, (interval,) = trl_runs["all_masked"]
    from harness.algorithms.grpo.wrong.poolings import flat_mean_of_microbatch_means

    empty = sum(count == 0 for count in interval.token_counts())
    assert empty >= 1
    nonempty = [t for t in interval.terms if int(t.mask.sum())]
    without = flat_mean_of_microbatch_means(nonempty, "entropy")
    assert logs[0]["entropy"] == pytest.approx(without * len(nonempty) / len(interval.records), rel=REL)


@pytest.mark.parametrize("name", ["uneven_lengths", "all_masked"])
def test_trl_grpo_extremes_are_means_of_micro_batch_extremes(trl_runs, name):
    from harness.algorithms.grpo.oracle.expect import expected_metrics
    from harness.algorithms.grpo.wrong.poolings import mean_of_microbatch_extremes

    spec, logs, per_interval = trl_runs[name]
    for log, interval in zip(logs, per_interval, strict=True):
        for metric in ("clip_ratio/low_min", "clip_ratio/high_max"):
            wrong = mean_of_microbatch_extremes(interval.terms, metric)
            assert log[metric] == pytest.approx(wrong, rel=REL, abs=1e-9), (metric, log[metric], wrong)
    # the first interval of uneven_lengths: a true maximum of 2/11 logged as 0.0732 (measured)
    first = expected_metrics(per_interval[0].records, spec)["clip_ratio/high_max"].value
    assert name != "uneven_lengths" or logs[0]["clip_ratio/high_max"] < first / 2


def test_trl_grpo_bnpo_optimises_a_mean_of_micro_batch_token_means():
    """gradient_partition[loss_type=bnpo]: the loss TRL backpropagates (and logs, summed over the window) is
    each micro-batch's token mean of the per-token loss, averaged, not the window's token mean."""
    if not _trl_grpo_available():
        pytest.skip("trl is not installed: pip install 'ppo-stats-harness[trl]'")
    from harness.algorithms.grpo import runs as scenarios
    from harness.algorithms.grpo.oracle.expect import Settings, token_terms
    from harness.algorithms.grpo.targets import trl

    spec = scenarios.LR0.with_(loss_type="bnpo", max_steps=1, logging_steps=1, per_device_train_batch_size=1,
                               gradient_accumulation_steps=8, steps_per_generation=8)  # fmt: skip
    run = trl.build(spec)
    (log,) = run.train()
    terms = [token_terms(r, Settings.of(spec)) for r in run.loss_inputs]
    means = [float((t.loss * t.mask).sum() / t.mask.sum().clamp(min=1)) for t in terms]
    pooled = float(sum((t.loss * t.mask).sum() for t in terms) / sum(t.mask.sum() for t in terms))
    assert log["loss"] == pytest.approx(sum(means) / len(means), rel=1e-5)
    assert abs(log["loss"] - pooled) > 0.1 * abs(pooled)  # measured: 0.03677 logged, -0.38730 token-pooled


# docs/trl-grpo.md: token means pooled as flat means of micro-batch means (class 16), extremes as means of
# micro-batch extremes (class 18). Every failing pooled metric is diagnosed with one of them, or with no
# diagnosis because class 17 gives the same number (windows of one micro-batch).
TRL_GRPO_CLASSES = {16, 18}


@pytest.mark.slow
@pytest.mark.parametrize("check_id", ["uneven_lengths[loss_type=dapo]", "short_window", "extremes", "all_masked"])
def test_trl_grpo_failing_pooled_metrics_are_diagnosed_as_docs_say(trl_grpo_verdict, check_id):
    _, report, _ = trl_grpo_verdict
    (check,) = [c for c in report["checks"] if c["id"] == check_id]
    failing = [m for m in check["metrics"] if m["failed"]]
    assert failing
    named = set()
    for m in failing:
        diagnosis = m["diagnosis"]
        if diagnosis is None:
            assert "unambiguously" in m["diagnosis_reason"], (m["name"], m["diagnosis_reason"])
            continue
        assert set(diagnosis["classes"]) <= TRL_GRPO_CLASSES, (m["name"], diagnosis)
        assert diagnosis["gap"] <= 1e-6 * (1 + abs(m["logged"]))
        named.add((m["name"], tuple(diagnosis["classes"])))
    assert ("entropy", (16,)) in named and ("clip_ratio/high_max", (18,)) in named


def test_trl_grpo_frac_reward_zero_std_under_batch_scaling_tests_the_batch_std():
    """reward_stats[scale_rewards=batch]: TRL flags a completion 'std 0' by the std its advantages are divided by,
    under batch scaling the generation batch's (never 0 here) where the contract takes its group's; under group
    scaling the two agree. Each interval of these runs is one generation."""
    if not _trl_grpo_available():
        pytest.skip("trl is not installed: pip install 'ppo-stats-harness[trl]'")
    from harness.algorithms.grpo.oracle import rewards
    from harness.algorithms.grpo.scenarios.rewards import REWARDS
    from harness.algorithms.grpo.targets import trl

    for scale in ("batch", "group"):
        spec = REWARDS.with_(scale_rewards=scale)
        run = trl.build(spec)
        logged = [log["frac_reward_zero_std"] for log in run.train()]
        made = rewards.generations(run.reward_calls, spec)
        groups = [float(made[g].zero_std.double().mean()) for g in sorted(made)]
        if scale == "batch":
            assert logged == [0.0, 0.0] and max(groups) > 0, groups  # measured: a group of four with std 0
        else:
            assert logged == pytest.approx(groups, abs=1e-9)


def test_trl_grpo_counts_a_completion_ending_in_pad_as_terminated():
    """completion_lengths at seed 6: TRL calls a completion truncated when its last id is neither EOS nor pad, so a
    completion that ran to max_completion_length and whose last sampled token is the pad counts as terminated (its
    clipped_ratio 0 where one of 16 did not end with EOS). The only failure at seeds 0-9."""
    if not _trl_grpo_available():
        pytest.skip("trl is not installed: pip install 'ppo-stats-harness[trl]'")
    from harness.algorithms import case
    from harness.algorithms.grpo.spec import GRPOSpec
    from harness.algorithms.grpo.targets import trl
    from harness.instrument.observe import ObservationCache

    result = case("completion_lengths", "grpo").run(ObservationCache(trl.build), GRPOSpec(seed=6))
    assert not result.passed
    failed = {(m.name, m.where) for m in result.metrics if m.failed}
    assert failed == {("completions/clipped_ratio", "log 2"), ("completions/mean_terminated_length", "log 2")}
    assert "log 2: the logged values are those of a trainer that counts a completion whose last token is the pad" in (
        result.message
    )
