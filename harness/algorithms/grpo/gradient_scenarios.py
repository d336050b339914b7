"""The GRPO gate's gradient scenario `logp_gradient`: the gradient at the new log-probs against the loss type's
formula.

Most of its runs are the gate's own (uneven_lengths for each loss type, short_window, extremes,
off_policy for cispo, sapo and vespo), so they cost nothing more; two more runs, of the extremes
geometry (two passes at LR 0.05, tokens clipped), cover beta 0 and a KL without the bias correction,
and two small ones (grpo, dr_grpo) windows of a single completion, where a count clamped at the
wrong floor shows. gradients.py has the formula.
"""

from __future__ import annotations

import dataclasses

from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import ObservationCache
from harness.require import require_ran
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult, MetricStatus, MetricVerdict

from . import gradient_formulas, gradients
from .checks import require_records
from .scenarios import SHORT, SOFT, UNEVEN, clipping, off_policy_spec, spec_for
from .spec import LOSS_TYPES, GRPOSpec

RUNS = {
    "short_window": "windows of 3 and 1 micro-batches (dapo's window share 3/4 and 1/4)",
    "extremes": "two passes at LR 0.05: ratios off 1, tokens clipped",
    "beta0": "the extremes run with beta 0 and the grpo loss type",
    "kl_uncorrected": "the extremes run with the KL not bias-corrected and the dr_grpo loss type",
}
"""The runs of the cases without a loss type (those are uneven_lengths' runs, one per loss type)."""
SINGLE = ("grpo", "dr_grpo")
"""Loss types run with windows of a single completion (`run=single_completion`): their counts are completions."""
CLIPPED = ("extremes", "beta0", "kl_uncorrected")
"""Runs that exist to show clipped tokens: each must have some token whose gradient the clip zeroes."""


def run_spec(run: GRPOSpec, case: Case) -> GRPOSpec:
    """The run a case checks: the gate's own where it has one (the cache runs it once)."""
    name = case.param("run")
    if name is None:
        return spec_for(UNEVEN, run).with_(loss_type=case.param("loss_type", run.loss_type))
    if name == "single_completion":  # per_device_train_batch_size=1, one micro-batch per window: a count of 1
        # two groups per generation: some advantage is non-zero, so the gradient is too even at beta 0 (with one
        # group of 4 per generation every advantage was 0 at seed 0; with two, 2 to 12 of 16 rows at seeds 0-5)
        return spec_for(UNEVEN, run).with_(name="logp_gradient", loss_type=case.param("loss_type"),
                                           per_device_train_batch_size=1, gradient_accumulation_steps=1,
                                           steps_per_generation=8, max_steps=16, logging_steps=8)  # fmt: skip
    if name == "short_window":
        return spec_for(SHORT, run)
    if name == "off_policy":
        return off_policy_spec(run, case.param("loss_type"))
    spec = clipping(run)
    if name == "beta0":
        return spec.with_(name="logp_gradient", beta=0.0, loss_type="grpo")
    if name == "kl_uncorrected":
        beta = run.beta or GRPOSpec().beta
        return spec.with_(name="logp_gradient", beta=beta, use_bias_correction_kl=False, loss_type="dr_grpo")
    return spec


def logp_gradient(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """dL/dlogp of every token of every micro-batch equals world * (the window weight of the loss type) *
    d l_t / d logp_t (docs/grpo-metrics.md, section 4; harness/algorithms/grpo/gradients.py)."""
    check = Check(case.id)
    obs = cache.get(run_spec(run, case), spy=False)
    if require_ran(obs, check) is None or require_records(obs, check) is None:
        return check.finish()
    spec = obs.spec
    try:
        gap = gradients.gaps(obs.ran.loss_inputs, gradients.Geometry.of(spec))
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return check.finish()
    if gap.compared == 0:
        check.fail("no token's gradient to compare (0 compared)")
        return check.finish()
    if not gap.scale > 0:
        return all_zero(check, obs.ran.loss_inputs, spec, gap.compared)
    if case.param("run") in CLIPPED and gap.clipped == 0:
        check.fail("no token's gradient was zeroed by the clip: the run did not show the clipped branch")
        return check.finish()
    judge(check, gap, spec, f"{spec.split_label} {gap.where}")
    return check.finish()


def all_zero(check: Check, records, spec: GRPOSpec, compared: int) -> CheckResult:
    """The formula's gradient is 0 at every token: every advantage of the run is 0 and beta is 0 (a group's
    rewards all alike, as may happen under `--set beta=0`). The recorded gradient must then be 0 too; it passes,
    saying that the loss's normalisation is not seen. With beta != 0 the KL term has a gradient: a failure."""
    largest = max(float((r.logp_grad * r.completion_mask).abs().max()) for r in records)
    if spec.beta != 0 or largest != 0.0:
        check.fail(f"the formula's gradient is 0 at all {compared} tokens compared (beta {spec.beta}), the "
                   f"recorded one reaches {largest:.3g}")  # fmt: skip
    else:
        check.note(f"every advantage of this run is 0 and beta is 0: the gradient is 0 at all {compared} tokens, as "
                   f"recorded; the loss's normalisation is not seen in this run")  # fmt: skip
    return check.finish()


def judge(check: Check, gap: gradients.Gaps, spec: GRPOSpec, where: str) -> None:
    """Compare the largest gap with 0 (tolerance scaled by the mean |formula|). A failure says in words which token
    it is, what was recorded there and what the formula gives, names the known wrong formula that reproduces the
    recorded gradient when one does (gradient_formulas.py), and notes the factors."""
    logged, expected, note = gradients.expectation(gap)
    verdicts = [explained(v, gap, spec) for v in compare(logged, expected, spec.dtype, kind="formula", where=where)]
    check.absorb(verdicts)
    if note and any(v.failed for v in verdicts):
        check.note(note)
    check.note(f"{gap.compared} tokens compared, {gap.clipped} of them clipped")


def explained(verdict: MetricVerdict, gap: gradients.Gaps, spec: GRPOSpec) -> MetricVerdict:
    """A failing verdict with its token in words (its reason) and its diagnosis; any other as it is."""
    if verdict.status is not MetricStatus.FAIL:
        return verdict
    diagnosis, why = gradient_formulas.diagnose(gap, gradients.Geometry.of(spec).settings, spec.dtype)
    words = gradient_formulas.worded(gap, spec.dtype) or verdict.reason
    return dataclasses.replace(verdict, where=spec.split_label, reason=words, diagnosis=diagnosis,
                               diagnosis_reason=why)  # fmt: skip


LOGP_GRADIENT = Scenario(
    "logp_gradient",
    logp_gradient,
    (("loss_type", LOSS_TYPES),),
    "dL/dlogp per token == world * window weight of the loss type * d l_t/dlogp (uneven lengths, every loss "
    "type; windows 3+1; clipped tokens; beta 0; KL not bias-corrected; windows of one completion; cispo, sapo, "
    "vespo off policy)",
    (
        *((("run", name),) for name in RUNS),
        *((("run", "single_completion"), ("loss_type", t)) for t in SINGLE),
        *((("run", "off_policy"), ("loss_type", t)) for t in SOFT),
    ),
)
