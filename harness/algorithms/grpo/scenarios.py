"""The GRPO gate's scenarios. Each reads top-down: run, check what it saw, expect, compare.

Every scenario first checks that it saw what it exists for (a loss record per micro-batch
in windows of the expected sizes, every metric logged and finite, the uneven lengths, the
short window, the clipped tokens or the empty micro-batches it needs) and fails otherwise.
The specs are plain `GRPOSpec`s, so any GRPO target runs them.
"""

from __future__ import annotations

import itertools
import math

import torch

from harness.compare import compare
from harness.instrument.observe import ObservationCache
from harness.oracle.gradients import applied_gap, largest_gap, running_counter
from harness.require import require, require_ran
from harness.scenario import Case, Scenario
from harness.tolerances import tolerance
from harness.verdict import Check, CheckResult

from .checks import compare_interval, logged_names, require_logs, require_records, untrained_micro_batches, window_sizes
from .contract import lr0_identities, partition_names, pooled_names
from .spec import CLIPPED_LOSS_TYPES, CUT_INVARIANT_LOSS_TYPES, LOSS_TYPES, SETTINGS, GRPOSpec

# Two generations of 16 completions (four groups), each trained in two windows of two micro-batches of 4, logged
# once per generation (the spec's default KL weight logs `kl`); completions end at the stop token (uneven lengths).
UNEVEN = GRPOSpec(name="uneven_lengths", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                  steps_per_generation=4, max_steps=4, logging_steps=2)  # fmt: skip
# TRL issue 7047: 3 micro-batches per window, 4 per generation, so each generation's last window holds one.
SHORT = UNEVEN.with_(name="short_window", per_device_train_batch_size=2, gradient_accumulation_steps=3,
                     steps_per_generation=4, max_steps=2, logging_steps=2)  # fmt: skip
# Two passes over a generation of 16 completions (four groups, so some advantages are non-zero at every seed)
# at a learning rate that moves the ratios past the clip range: high_max 0.33-0.67 at seeds 0-9, where the mean
# of the micro-batch maxima is 0.05-0.20.
EXTREME = UNEVEN.with_(name="extremes", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                       steps_per_generation=4, num_iterations=2, max_steps=4, logging_steps=4,
                       learning_rate=0.05)  # fmt: skip
FRESH = UNEVEN.with_(name="freshness", logging_steps=1, max_steps=3)
# Completions that start with pad: empty rows, and micro-batches of one row that are all masked (1 to 5 of the 8
# at seeds 0-9 with this bias; 2.5 left seed 2 without one).
ALL_MASKED = UNEVEN.with_(name="all_masked", per_device_train_batch_size=1, gradient_accumulation_steps=4,
                          steps_per_generation=8, max_steps=2, logging_steps=2, pad_logit_bias=3.5)  # fmt: skip
LR0 = UNEVEN.with_(name="partition", learning_rate=0.0, per_device_train_batch_size=4,
                   gradient_accumulation_steps=2, steps_per_generation=2)  # fmt: skip
# The uneven run at a temperature other than 1, so that log-probs and entropies of unscaled logits would show.
LOGITS = UNEVEN.with_(name="logit_recompute", temperature=0.7, max_steps=2, logging_steps=2)
CUTS = ((4, 2, 2, 1), (2, 4, 4, 1), (8, 1, 1, 1), (1, 8, 8, 1), (4, 1, 2, 1), (2, 3, 4, 1), (4, 2, 2, 2))
"""(per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation, num_iterations): cuts of one
generation batch of 8 completions, the first the reference. Windows of 2, 4, 1, 8, 1+1, 3+1 and 2+2."""
GRADIENT_CUTS = ((4, 2), (2, 4), (8, 1), (1, 8))
"""(per_device_train_batch_size, steps_per_generation = gradient_accumulation_steps): one window per generation."""
SOFT = ("cispo", "sapo", "vespo")
"""The loss types without a hard clip: their objectives bend with r away from 1, which LR 1e-3 barely shows."""
CISPO_CAP = 1.0
"""cispo's epsilon_high in its off-policy run when the run keeps the default 0.2: with ratios spread around 1 some
weights are capped and some not (at 0.2 every one is, and a weight that carries a gradient would not show)."""
NO_GRADIENT = "no gradient was compared"
"""What a gradient check fails with when it compared no gradient at all."""


def spec_for(base: GRPOSpec, run: GRPOSpec) -> GRPOSpec:
    """`base` with the run-wide settings of `run`: seed, device, dtype, and every trainer setting of SETTINGS."""
    return base.with_(seed=run.seed, device=run.device, dtype=run.dtype, **{k: getattr(run, k) for k in SETTINGS})


def pooled_check(obs, check: Check, need=None) -> None:
    """Every interval's pooled metrics against the oracle fed that interval's records; `need(intervals)` says
    whether the run showed what the scenario is for (a string naming what is missing, or '')."""
    names = logged_names(obs, pooled_names(obs.spec.beta, obs.spec.loss_type), check)
    per_interval = require_records(obs, check)
    if per_interval is None or not require_logs(obs, names, check):
        return
    missing = need(per_interval) if need else ""
    if not require(check, not missing, missing):
        return
    for interval in per_interval:
        compare_interval(obs, interval, check, names)


def uneven_lengths(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Micro-batches of different token counts: each interval's pooled metrics equal the oracle's."""
    check = Check(case.id)
    obs = cache.get(spec_for(UNEVEN, run).with_(loss_type=case.param("loss_type", run.loss_type)), spy=False)

    def need(per_interval):
        even = [i.index + 1 for i in per_interval if len(set(i.token_counts())) < 2]
        return f"interval(s) {even} had micro-batches of equal token counts" if even else ""

    pooled_check(obs, check, need)
    return check.finish()


def short_window(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Windows of 3 and 1 micro-batches in one interval (TRL issue 7047): pooled over tokens, not over windows."""
    check, obs = Check(case.id), cache.get(spec_for(SHORT, run), spy=False)

    def need(per_interval):
        records = [r for interval in per_interval for r in interval.records]
        sizes = window_sizes(records)
        spans = any(len({r.generation for r in records if r.window == w}) > 1 for w in range(len(sizes)))
        return "" if len(set(sizes)) > 1 or spans else f"windows of {sizes} micro-batches, none across generations"

    pooled_check(obs, check, need)
    return check.finish()


def clipping(run: GRPOSpec) -> GRPOSpec:
    """The extremes geometry under the run's loss type if it clips, else under the default one: the clip
    extremes exist only for the loss types with a hard clip (`--set loss_type=sapo` runs them as dapo)."""
    spec = spec_for(EXTREME, run)
    return spec if spec.loss_type in CLIPPED_LOSS_TYPES else spec.with_(loss_type=GRPOSpec().loss_type)


def off_policy_spec(run: GRPOSpec, loss_type: str) -> GRPOSpec:
    """The extremes geometry (two passes at LR 0.05: ratios far from 1) under a loss type without a clip."""
    spec = spec_for(EXTREME, run).with_(name="off_policy", loss_type=loss_type)
    if loss_type == "cispo" and run.epsilon_high == GRPOSpec().epsilon_high:
        spec = spec.with_(epsilon_high=CISPO_CAP)
    return spec


def off_policy(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Ratios far from 1 under cispo, sapo or vespo: each interval's pooled metrics (cispo_clip_ratio,
    vespo/phi_seq_mean, policy_loss, entropy, kl) equal the oracle's."""
    check = Check(case.id)
    obs = cache.get(off_policy_spec(run, case.param("loss_type")), spy=False)
    spec = obs.spec

    def need(per_interval):
        for interval in per_interval:
            terms = interval.terms
            spread = max((float(((t.ratio - 1).abs() * t.mask).max()) for t in terms if t.mask.any()), default=0.0)
            if spread < 0.05:
                return f"interval {interval.index + 1}: every ratio within {spread:.3g} of 1"
            if spec.loss_type == "cispo":
                capped = [bool(((t.ratio > spec.epsilon_high) & t.mask).any()) for t in terms]
                free = [bool(((t.ratio <= spec.epsilon_high) & t.mask).any()) for t in terms]
                if not (any(capped) and any(free)):
                    return f"interval {interval.index + 1}: no weight on both sides of epsilon_high {spec.epsilon_high}"
            if spec.loss_type == "vespo":
                phis = torch.cat([t.phi for t in terms])
                if float((phis - 1).abs().max()) < 0.01:
                    return f"interval {interval.index + 1}: every sequence weight phi within 0.01 of 1"
        return ""

    pooled_check(obs, check, need)
    return check.finish()


def extremes(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """clip_ratio/low_min and high_max are true extremes over the interval's completions, and the other
    pooled metrics hold, with tokens clipped in some micro-batches and not in others."""
    check, obs = Check(case.id), cache.get(clipping(run), spy=False)

    def need(per_interval):
        for interval in per_interval:
            maxima = set()
            for terms in interval.terms:
                has = terms.mask.any(dim=1)
                if has.any():
                    maxima.add(float(terms.per_completion(terms.high)[has].max()))
            if len(maxima) < 2 or max(maxima) == 0:
                return f"the micro-batches' largest high-clip fractions were {sorted(maxima)}: no extreme to tell"
        return ""

    pooled_check(obs, check, need)
    return check.finish()


def freshness(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Logged every step: each log equals an oracle fed only that interval's records (nothing carried over)."""
    check, obs = Check(case.id), cache.get(spec_for(FRESH, run), spy=False)
    pooled_check(obs, check, lambda per: "" if len(per) > 1 else "only one interval was logged")
    return check.finish()


def all_masked(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Micro-batches with no completion token add nothing: no NaN, no zero pulling a mean down."""
    check, obs = Check(case.id), cache.get(spec_for(ALL_MASKED, run), spy=False)

    def need(per_interval):
        counts = [c for interval in per_interval for c in interval.token_counts()]
        return "" if 0 in counts else f"no all-masked micro-batch was seen (tokens per micro-batch {counts})"

    pooled_check(obs, check, need)
    return check.finish()


def partition(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """At LR 0, one generation batch cut into other micro-batches, windows and passes logs the same metrics;
    no token is clipped. No records needed. `dropout=0.1`: the same with attention dropout in the models, where
    a trainer that lets dropout act clips tokens (old and new log-probs are two draws) and logs cut-dependent
    means."""
    check = Check(case.id)
    base = spec_for(LR0, run)
    base = base.with_(dropout=case.param("dropout", base.dropout))
    specs = []
    for bs, gas, spg, iters in CUTS:
        spec = base.with_(per_device_train_batch_size=bs, gradient_accumulation_steps=gas,
                          steps_per_generation=spg, num_iterations=iters)  # fmt: skip
        windows = len(spec.window_sizes)
        specs.append(spec.with_(max_steps=windows, logging_steps=windows))
    observed = [cache.get(spec, spy=False) for spec in specs]
    names = logged_names(observed[0], partition_names(base.beta, base.loss_type), check)
    if not all([require_logs(o, names, check) for o in observed]):
        return check.finish()
    first = observed[0].ran.logs[0]
    for obs in observed:
        log = obs.ran.logs[0]
        where = obs.spec.split_label
        check.absorb(compare(log, lr0_identities(base.loss_type), obs.spec.dtype, kind="identity", where=where))
        if obs is not observed[0]:
            check.absorb(compare({n: log[n] for n in names}, {n: first[n] for n in names}, obs.spec.dtype,
                                 kind="partition", where=where))  # fmt: skip
    if check.failed:
        check.note(f"reference cut {observed[0].spec.split_label}")
    return check.finish()


def gradient_partition(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """At LR 0, one window per generation: the step's gradient is that of the loss type's objective over the
    generation batch, however it is cut into micro-batches."""
    check = Check(case.id)
    base = spec_for(LR0, run).with_(loss_type=case.param("loss_type", run.loss_type), max_steps=1, logging_steps=1)
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
    largest_gap(check, gaps, run.dtype, none=NO_GRADIENT)
    return check.finish()


def logit_recompute(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Each micro-batch's log-probs and entropies equal their float64 formulas from the loss's logits
    (the target's `logit_gaps`), at temperature 0.7 unless the run sets another."""
    check = Check(case.id)
    spec = spec_for(LOGITS, run)
    if run.temperature == GRPOSpec().temperature:
        spec = spec.with_(temperature=LOGITS.temperature)
    obs = cache.get(spec, spy=False)
    if require_records(obs, check) is None:
        return check.finish()
    worst: dict[str, tuple[float, str]] = {}
    for i, record in enumerate(obs.ran.loss_inputs):
        gaps = record.logit_gaps
        if gaps is None:
            check.fail(f"loss record {i + 1} has no logit_gaps: the target does not compare its per-token values")
            return check.finish()
        for key in ("logps", "entropies"):
            gap = getattr(gaps, key)
            if gap is None:
                check.fail(f"loss record {i + 1}: the trainer's {key} function was not called in its loss")
                return check.finish()
            gap, current = float(gap), worst.get(key)
            if current is None or math.isnan(gap) or (not math.isnan(current[0]) and gap > current[0]):
                worst[key] = (gap, f"micro-batch {i + 1}")  # a NaN stays
    for key, (gap, where) in worst.items():
        check.absorb(compare({f"logit_gap/{key}": gap}, {f"logit_gap/{key}": 0.0}, spec.dtype, kind="recompute",
                             where=where))  # fmt: skip
    return check.finish()


def every_microbatch_applied(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """One optimizer step per window, after exactly that window's backward passes; each step's .grad is exactly
    its micro-batches' gradients (clipped when max_grad_norm is set); nothing left unapplied, and no micro-batch
    of a generation left out (the windows are read from the loss records, which a skipped one never writes)."""
    check, obs = Check(case.id), cache.get(spec_for(SHORT, run).with_(max_steps=4, logging_steps=2), spy=False)
    ran = require_ran(obs, check)
    if ran is None:
        return check.finish()
    grads, spec = ran.grads, obs.spec
    seen = [len(step.backward_ids) for step in grads.steps]
    windows = window_sizes(ran.loss_inputs) if ran.loss_inputs else spec.run_windows()  # as the loss records say
    if seen != windows or len(windows) != spec.max_steps:
        check.fail(f"backward passes per optimizer step {seen}, expected {spec.max_steps} steps of {windows}")
    if grads.unapplied:
        check.fail(f"{len(grads.unapplied)} backward pass(es) never reached an optimizer step")
    untrained = untrained_micro_batches(ran.loss_inputs, spec) if ran.loss_inputs else ""
    if untrained:
        check.fail(untrained)
    ends = list(itertools.accumulate(windows))
    counter = running_counter(grads, spec.gradient_accumulation_steps, lambda after: after == ends,
                              f"the windows {ends}", "windows")  # fmt: skip
    if counter:
        check.note(counter)
    tol = tolerance("gradient", spec.dtype)
    gaps = []
    for k, step in enumerate(grads.steps):
        gaps.append((f"step {k + 1}", applied_gap(step, spec.max_grad_norm)))
        if spec.max_grad_norm is not None and step.applied_norm > spec.max_grad_norm * (1 + tol.rel_tol) + tol.abs_tol:
            check.fail(f"step {k + 1}: applied gradient norm {step.applied_norm:.6g} exceeds {spec.max_grad_norm}")
    largest_gap(check, gaps, spec.dtype, none=NO_GRADIENT)
    return check.finish()


SCENARIOS = (
    Scenario("uneven_lengths", uneven_lengths, (("loss_type", LOSS_TYPES),),
             "micro-batches of uneven token counts, LR 1e-3, beta 0.04: each interval pooled == oracle"),
    Scenario("short_window", short_window, (),
             "windows of 3 and 1 micro-batches in one interval (TRL issue 7047): pooled == oracle"),
    Scenario("extremes", extremes, (),
             "two passes at LR 0.05, tokens clipped: low_min / high_max true extremes, pooled == oracle"),
    Scenario("freshness", freshness, (), "logged every step: each log == an oracle fed only its interval"),
    Scenario("all_masked", all_masked, (), "all-masked micro-batches add nothing: no NaN, no zero in the mean"),
    Scenario("partition", partition, (),
             "LR 0: one generation batch cut 7 ways logs the same metrics; no token clipped (also with dropout)",
             ((), (("dropout", 0.1),))),
    Scenario("off_policy", off_policy, (("loss_type", SOFT),),
             "two passes at LR 0.05 under cispo (epsilon_high 1), sapo, vespo: ratios far from 1, pooled == oracle"),
    Scenario("gradient_partition", gradient_partition, (("loss_type", CUT_INVARIANT_LOSS_TYPES),),
             "LR 0: the step gradient of the loss type does not depend on the micro-batch cut (bnpo's does: its "
             "normaliser is each micro-batch's own tokens)"),
    Scenario("logit_recompute", logit_recompute, (),
             "temperature 0.7: each micro-batch's log-probs and entropies == float64 formulas from its logits"),
    Scenario("every_microbatch_applied", every_microbatch_applied, (),
             "one step per window (3+1), after exactly its backward passes; .grad is exactly theirs; "
             "every micro-batch of a generation ran"),
)  # fmt: skip
