"""The GRPO gate's gradient scenarios: `logp_gradient` (the gradient at the new log-probs against the loss type's
formula), `gradient_partition` (the step's gradient whatever the cut) and `every_microbatch_applied` (one step
per window, after exactly its backward passes).

Most of its runs are the gate's own (uneven_lengths for each loss type, short_window, extremes, off_policy for
cispo, sapo and vespo, extremes' sequence-level runs of grpo and cispo, and reward_stats' small groups, the one
run that stores no old log-probs), so they cost nothing more; the sequence-level runs of sapo and vespo are this
check's alone (scenarios/sequence.py says what each sequence-level run must show); six more runs, of the extremes
geometry (two passes at LR 0.05, tokens clipped), cover beta 0, a KL without the bias correction, delta's cap,
clip bounds that differ (epsilon_low 0.05, epsilon_high 0.6), TRL's entropy mask (top_entropy_quantile 0.2) and its
off-policy sequence mask (off_policy_mask_threshold 2.0; policy_masks.py says what each mask's run must show),
and two small ones (grpo, dr_grpo) windows of a single completion, where a count clamped at the wrong floor shows;
dr_grpo on completions shorter than the maximum; dapo in windows that run on across generations (a target whose
windows end with their generation declares that run not applicable). gradients.py has the formula.
"""

from __future__ import annotations

import dataclasses
import itertools

from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import ObservationCache, grad_copies
from harness.oracle.gradients import applied_gap, largest_gap, running_counter
from harness.require import require, require_ran
from harness.scenario import Case, Scenario
from harness.tolerances import tolerance
from harness.verdict import Check, CheckResult, MetricStatus, MetricVerdict, Wording

from .. import runs
from ..instruments import recorded
from ..oracle import gradients
from ..oracle.token_gradients import token_gradient
from ..runs import GRADIENT_CUTS, LR0, NO_GRADIENT, ON_THE_FLY, SHORT, SOFT, UNEVEN, clipping, off_policy_spec, spec_for
from ..spec import CLIPPED_LOSS_TYPES, CUT_INVARIANT_LOSS_TYPES, LOSS_TYPES, GRPOSpec
from ..tolerances import TOLERANCES
from ..wrong import gradient_formulas
from . import sequence
from .policy_masks import shows_mask, shows_sequence_mask
from .preconditions import definitions, require_records, untrained_micro_batches, window_sizes
from .preconditions import require_short_generation as short_generation
from .preconditions import require_spanning_window as spanning_window

RUNS = {
    "short_window": "windows of 3 and 1 micro-batches (dapo's window share 3/4 and 1/4)",
    "extremes": "two passes at LR 0.05: ratios off 1, tokens clipped",
    "beta0": "the extremes run with beta 0 and the grpo loss type",
    "kl_uncorrected": "the extremes run with the KL not bias-corrected and the dr_grpo loss type",
    "delta": f"the extremes run with beta 0, the grpo loss type and delta {runs.DELTA:g}: ratios above it capped",
    "clip_asymmetric": "the extremes run with epsilon_low != epsilon_high (0.05 and 0.6 unless the run's differ)",
    "on_the_fly": "one window per generation, one pass: no old log-probs are stored, the loss takes the current ones "
    "detached (reward_stats[run=small_groups]'s run)",
    "sequence_level": "the extremes run at importance_sampling_level 'sequence' under grpo (GSPO): one ratio per "
    "completion, each token's gradient through its completion's mean log-ratio; some completions clipped",
    "short_completions": "dr_grpo, completions of up to 24 tokens ended early by a stop bias: some generation's every "
    "completion shorter than the maximum, by which dr_grpo still divides",
    "across_generations": "dapo in windows of 3 micro-batches over generations of 2, each window running on into "
    "the next generation (TRL's one step counter): each token divided by its own generation's tokens",
    "top_entropy": f"the extremes run with top_entropy_quantile {runs.TOP_ENTROPY_QUANTILE:g}: the policy term only at "
    "each micro-batch's tokens of entropy at or above its quantile, the KL term at every token; some tokens of "
    "non-zero advantage masked out, some kept",
    "off_policy_mask": f"the extremes run with off_policy_mask_threshold {runs.OFF_POLICY_MASK_THRESHOLD:g}: the "
    "policy term of each completion of negative advantage whose KL estimate (its mean old_logp - logp) exceeds it "
    "left out, the KL term kept; some such completions dropped, some kept off policy",
}
"""The runs of the cases without a loss type (those are uneven_lengths' runs, one per loss type); off_policy and
sequence_level also run cispo, sapo and vespo, named by their loss type."""
SINGLE = ("grpo", "dr_grpo")
"""Loss types run with windows of a single completion (`run=single_completion`): their counts are completions."""
CLIPPED = ("extremes", "beta0", "kl_uncorrected", "sequence_level")
"""Runs that exist to show clipped tokens: each must have some token whose gradient the clip zeroes."""


OVERRIDES = ("dtype", "importance_sampling_level")
"""Case parameters that set the spec field of their name on the case's run: `dtype=bfloat16` runs the entropy mask
with entropies held in bfloat16 (the quantile is taken in float32 at least, TRL's `entropies.float()`), and
`importance_sampling_level=sequence` runs delta's cap on each completion's ratio."""


def run_spec(run: GRPOSpec, case: Case) -> GRPOSpec:
    """The run a case checks: the gate's own where it has one (the cache runs it once), with the case's OVERRIDES."""
    spec = base_spec(run, case)
    return spec.with_(**{key: case.param(key) for key in OVERRIDES if case.param(key) is not None})


def base_spec(run: GRPOSpec, case: Case) -> GRPOSpec:
    """The run of the case's `run` and `loss_type` parameters."""
    name = case.param("run")
    if name is None:
        return spec_for(UNEVEN, run).with_(loss_type=case.param("loss_type", run.loss_type))
    if name == "single_completion":  # per_device_train_batch_size=1, one micro-batch per window: a count of 1
        # two groups per generation: some advantage is non-zero, so the gradient is too even at beta 0 (with one
        # group of 4 per generation every advantage was 0 at seed 0; with two, 2 to 12 of 16 rows at seeds 0-5)
        return spec_for(UNEVEN, run).with_(name="logp_gradient", loss_type=case.param("loss_type"),
                                           per_device_train_batch_size=1, gradient_accumulation_steps=1,
                                           steps_per_generation=8, max_steps=16, logging_steps=8)  # fmt: skip
    if name == "short_window":  # under the run's loss type, or the case's
        return spec_for(SHORT, run).with_(loss_type=case.param("loss_type", run.loss_type))
    if name == "on_the_fly":
        return spec_for(ON_THE_FLY, run)
    if name == "off_policy":
        return off_policy_spec(run, case.param("loss_type"))
    if name == "clip_asymmetric":
        return runs.asymmetric_clip_spec(run)
    if name == "sequence_level":
        return runs.sequence_level_spec(run, case.param("loss_type", "grpo"))
    if name in ("top_entropy", "off_policy_mask", "short_completions", "across_generations"):
        return getattr(runs, f"{name}_spec")(run)
    spec = clipping(run)
    if name == "beta0":
        return spec.with_(name="logp_gradient", beta=0.0, loss_type="grpo")
    if name == "kl_uncorrected":
        beta = run.beta or GRPOSpec().beta
        return spec.with_(name="logp_gradient", beta=beta, use_bias_correction_kl=False, loss_type="dr_grpo")
    if name == "delta":
        delta = runs.SEQUENCE_DELTA if case.param("importance_sampling_level") == "sequence" else runs.DELTA
        return spec.with_(name="logp_gradient", beta=0.0, loss_type="grpo", delta=delta)
    return spec


def logp_gradient(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """dL/dlogp of every token of every micro-batch equals world * (the window weight of the loss type) *
    d l_t / d logp_t (docs/grpo-metrics.md, section 4; harness/algorithms/grpo/oracle/gradients.py)."""
    check = Check(case.id)
    obs = cache.get(run_spec(run, case), spy=False)
    declared = definitions(cache)
    if require_ran(obs, check) is None or require_records(obs, check, declared) is None:
        return check.finish()
    spec = obs.spec
    if case.param("run") == "on_the_fly" and len(spec.window_sizes) != 1:
        check.fail(f"windows of {list(spec.window_sizes)} micro-batches per generation: a generation outlives an "
                   f"optimizer step, so the run stores old log-probs")  # fmt: skip
        return check.finish()
    try:
        gap = gradients.gaps(recorded(obs.ran).loss_inputs, gradients.WindowWeights.of(spec, definitions=declared))
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return check.finish()
    if gap.compared == 0:
        check.fail("no token's gradient to compare (0 compared)")
        return check.finish()
    if not gap.scale > 0:
        return all_zero(check, recorded(obs.ran).loss_inputs, spec, gap.compared)
    if case.param("run") in CLIPPED and spec.loss_type in CLIPPED_LOSS_TYPES and gap.clipped == 0:
        check.fail("no token's gradient was zeroed by the clip: the run did not show the clipped branch")
        return check.finish()
    if case.param("run") == "sequence_level":
        count, what = sequence.shown(gap, spec.dtype)
        if not count:
            check.fail(f"0 {what}: the run did not show what {spec.loss_type}'s sequence level changes")
            return check.finish()
        check.note(f"{count} {what}")
    if case.param("run") == "top_entropy" and not shows_mask(check, gap, spec):
        return check.finish()
    if case.param("run") == "off_policy_mask" and not shows_sequence_mask(check, gap, spec):
        return check.finish()
    shown = {"short_completions": short_generation, "across_generations": spanning_window}.get(case.param("run"))
    if shown is not None and not shown(recorded(obs.ran).loss_inputs, spec, check):
        return check.finish()
    if case.param("run") == "clip_asymmetric":
        told = bounds_told_apart(gap, spec)
        if not told:
            check.fail(f"no compared token's gradient changes with epsilon_low {spec.epsilon_low} and epsilon_high "
                       f"{spec.epsilon_high} swapped: the run did not tell the two bounds apart")  # fmt: skip
            return check.finish()
        check.note(f"{told} tokens whose gradient changes with epsilon_low {spec.epsilon_low} and epsilon_high "
                   f"{spec.epsilon_high} swapped")  # fmt: skip
    if case.param("run") == "delta" and gap.capped == 0:
        check.fail(f"no token's gradient was zeroed by delta's cap ({spec.delta:g}): the run did not show the cap")
        return check.finish()
    judge(check, gap, spec, f"{spec.split_label} {gap.where}")
    return check.finish()


def bounds_told_apart(gap: gradients.Gaps, spec: GRPOSpec) -> int:
    """Compared tokens whose formula gradient changes when the two clip bounds are swapped: those a trainer that
    swaps them, or takes one for both, would get wrong (some token of the clip_asymmetric run must be one)."""
    settings = gap.settings or gradients.WindowWeights.of(spec).settings
    swapped = dataclasses.replace(settings, epsilon_low=settings.epsilon_high, epsilon_high=settings.epsilon_low)
    told = 0
    for row in gap.rows:
        other = token_gradient(row.record, swapped, row.terms.entropy)
        keep = ~row.terms.uncertain & ~other.uncertain & row.record.completion_mask.bool()
        told += int((keep & (other.value != row.terms.value)).sum())
    return told


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
    verdicts = compare(logged, expected, spec.dtype, TOLERANCES, kind="formula", where=where)
    verdicts = [explained(v, gap, spec) for v in verdicts]
    check.absorb(verdicts)
    if note and any(v.failed for v in verdicts):
        check.note(note)
    capped = f", {gap.capped} capped by delta" if gap.capped else ""
    dual = f", {gap.dual} held by the dual clip" if gap.dual else ""
    check.note(f"{gap.compared} tokens compared, {gap.clipped} of them clipped{capped}{dual}")


def explained(verdict: MetricVerdict, gap: gradients.Gaps, spec: GRPOSpec) -> MetricVerdict:
    """A failing verdict with its token in words (its reason) and its diagnosis; any other as it is."""
    if verdict.status is not MetricStatus.FAIL:
        return verdict
    settings = gap.settings or gradients.WindowWeights.of(spec).settings
    diagnosis, why = gradient_formulas.diagnose(gap, settings, spec.dtype)
    words = gradient_formulas.worded(gap, spec.dtype)
    said = {"reason": words, "wording": Wording.CHECK} if words else {}
    return dataclasses.replace(verdict, where=spec.split_label, diagnosis=diagnosis, diagnosis_reason=why, **said)


def gradient_partition(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """At LR 0, one window per generation: the step's gradient is that of the loss type's objective over the
    generation batch, however it is cut into micro-batches."""
    check = Check(case.id)
    base = spec_for(LR0, run).with_(loss_type=case.param("loss_type", run.loss_type), max_steps=1, logging_steps=1)
    with grad_copies():  # the steps' .grad copies are what it compares
        observed = [cache.get(base.with_(per_device_train_batch_size=b, gradient_accumulation_steps=g,
                                         steps_per_generation=g), spy=False) for b, g in GRADIENT_CUTS]  # fmt: skip
    if not all([require_ran(o, check) for o in observed]):
        return check.finish()
    counts = [len(o.ran.grads.steps) for o in observed]
    if counts != [1] * len(observed):
        check.fail(f"optimizer steps per cut {counts}, expected one each")
        return check.finish()
    first = observed[0].ran.grads.steps[0].grad
    scale = max(first.abs().max().item(), 1e-30)
    gaps = [(o.spec.split_label, (o.ran.grads.steps[0].grad - first).abs().max().item() / scale) for o in observed[1:]]
    largest_gap(check, gaps, run.dtype, TOLERANCES, none=NO_GRADIENT)
    return check.finish()


CLIP_NORM = 0.05
"""The clipping run's max_grad_norm: below every step's gradient norm in the toy world (measured on the reference
trainer: 0.21 to 8.0 over seeds 0-4 in float32, float64 and bfloat16), so clipping acts at every step."""


def every_microbatch_applied(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """One optimizer step per window, after exactly that window's backward passes; each step's .grad is exactly
    its micro-batches' gradients (clipped when max_grad_norm is set); nothing left unapplied, and no micro-batch
    of a generation left out (the windows are read from the loss records, which a skipped one never writes)."""
    spec = spec_for(SHORT, run).with_(max_steps=4, logging_steps=2)
    clip = case.param("max_grad_norm", None)
    check, obs = Check(case.id), cache.get(spec if clip is None else spec.with_(max_grad_norm=clip), spy=False)
    ran = require_ran(obs, check)
    if ran is None:
        return check.finish()
    grads, spec = ran.grads, obs.spec
    if clip is not None and not require(check, grads.steps and all(s.raw_norm > clip for s in grads.steps),
                                        f"a step's gradient norm did not exceed max_grad_norm={clip} (norms "
                                        f"{[round(s.raw_norm, 4) for s in grads.steps]}): clipping must act at "
                                        f"every step"):  # fmt: skip
        return check.finish()
    seen, records = [len(step.backward_ids) for step in grads.steps], recorded(ran).loss_inputs
    windows = window_sizes(records) if records else spec.run_windows()  # as the loss records say
    if seen != windows or len(windows) != spec.max_steps:
        check.fail(f"backward passes per optimizer step {seen}, expected {spec.max_steps} steps of {windows}")
    if grads.unapplied:
        check.fail(f"{len(grads.unapplied)} backward pass(es) never reached an optimizer step")
    untrained = untrained_micro_batches(records, spec) if records else ""
    if untrained:
        check.fail(untrained)
    ends = list(itertools.accumulate(windows))
    counter = running_counter(grads, spec.gradient_accumulation_steps, lambda after: after == ends,
                              f"the windows {ends}", "windows")  # fmt: skip
    if counter is not None:
        check.diagnose(counter)
    tol = tolerance("gradient", spec.dtype, TOLERANCES)
    gaps = []
    for k, step in enumerate(grads.steps):
        gaps.append((f"step {k + 1}", applied_gap(step, spec.max_grad_norm)))
        if spec.max_grad_norm is not None and step.applied_norm > spec.max_grad_norm * (1 + tol.rel_tol) + tol.abs_tol:
            check.fail(f"step {k + 1}: applied gradient norm {step.applied_norm:.6g} exceeds {spec.max_grad_norm}")
    largest_gap(check, gaps, spec.dtype, TOLERANCES, none=NO_GRADIENT)
    return check.finish()


LOGP_GRADIENT = Scenario(
    "logp_gradient",
    logp_gradient,
    (("loss_type", LOSS_TYPES),),
    "dL/dlogp per token == world * window weight of the loss type * d l_t/dlogp (uneven lengths, every loss type; "
    "windows 3+1 under every loss type; clipped tokens; beta 0; KL not bias-corrected; delta's cap; clip bounds "
    "that differ; old log-probs not stored; sequence-level ratios; windows of one completion; cispo, sapo, vespo "
    "off policy, and at sequence level: cispo's capped ratios, sapo's bent gate, vespo's KL corrected by the "
    "sequence ratio; the policy term under the entropy mask of top_entropy_quantile, also with entropies in "
    "bfloat16; the policy term under the off-policy sequence mask; delta's cap on each completion's ratio at sequence "
    "level; dr_grpo on completions shorter than the max; "
    "dapo in windows that run across generations)",
    (
        *((("run", name),) for name in RUNS),
        *((("run", "single_completion"), ("loss_type", t)) for t in SINGLE),
        *((("run", "short_window"), ("loss_type", t)) for t in LOSS_TYPES if t != GRPOSpec().loss_type),
        *((("run", "off_policy"), ("loss_type", t)) for t in SOFT),
        *((("run", "sequence_level"), ("loss_type", t)) for t in SOFT),
        (("run", "top_entropy"), ("dtype", "bfloat16")),
        (("run", "delta"), ("importance_sampling_level", "sequence")),
    ),
)


GRADIENT_SCENARIOS = (
    Scenario("gradient_partition", gradient_partition, (("loss_type", CUT_INVARIANT_LOSS_TYPES),),
             "LR 0: the step gradient of the loss type does not depend on the micro-batch cut (bnpo's does: its "
             "normaliser is each micro-batch's own tokens)"),
    Scenario("every_microbatch_applied", every_microbatch_applied, (),
             "one step per window (3+1), after exactly its backward passes; .grad is exactly theirs (clipped at "
             "max_grad_norm 0.05, which every step exceeds); every micro-batch of a generation ran",
             ((), (("max_grad_norm", CLIP_NORM),))),
    LOGP_GRADIENT,
)  # fmt: skip
