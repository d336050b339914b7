"""The PPO gate's gradient scenarios: what the optimizer applies, not what is logged.

`gradient_partition` compares the step gradients of different cuts of one minibatch;
`gradient_decomposition` the step gradient with its micro-batches' own gradients, weighted by their token
counts (decomposition.py); `logp_gradient` the gradient at the new log-probs with the formula
(gradients.py); `every_microbatch_applied` that each backward pass reaches a step of its own update.
"""

from __future__ import annotations

from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import ObservationCache, grad_copies
from harness.oracle.gradients import applied_gap, largest_gap, running_counter
from harness.require import require_ran
from harness.scenario import Case, Scenario
from harness.tolerances import tolerance
from harness.verdict import Check, CheckResult, Diagnosis

from ..oracle import decomposition, gradients, value_gradients
from ..oracle.scores import update_scores
from ..runs import GRADIENT_CUTS, LR0, UNEVEN, spec_for
from ..spec import ScenarioSpec
from ..tolerances import TOLERANCES
from ..wrong.poolings import AccumulationSlots
from .preconditions import require_view


def gradient_partition(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At LR 0, each optimizer step's gradient is the same however its minibatch is cut into micro-batches."""
    check = Check(case.id)
    base = spec_for(LR0, run).with_(name="gradient_partition")
    with grad_copies():  # the steps' .grad copies are what it compares
        observed = [cache.get(base.with_(per_device_train_batch_size=b, gradient_accumulation_steps=g))
                    for b, g in GRADIENT_CUTS]  # fmt: skip
    if not all([require_ran(o, check) for o in observed]):
        return check.finish()
    first = observed[0]
    if not first.ran.grads.steps:
        check.fail("no optimizer step was seen")
        return check.finish()
    gaps = []
    for other in observed[1:]:
        label, steps = other.spec.split_label, other.ran.grads.steps
        if len(steps) != len(first.ran.grads.steps):
            check.fail(f"{label}: {len(steps)} optimizer steps, {first.spec.split_label}: {len(first.ran.grads.steps)}")
            continue
        for k, (a, b) in enumerate(zip(first.ran.grads.steps, steps)):
            gap = (a.grad - b.grad).abs().max().item()
            gaps.append((f"{label} step {k + 1}", gap / max(a.grad.abs().max().item(), 1e-30)))
    largest_gap(check, gaps, run.dtype, TOLERANCES)
    return check.finish()


def minibatch_counter(grads, per_minibatch: int, accumulation: int) -> Diagnosis | None:
    """The class-15 diagnosis, or None: the steps fall off the minibatch boundaries (multiples of `per_minibatch`),
    each after a multiple of `accumulation` micro-batches counted across the whole run."""
    aligned = lambda after: per_minibatch < 1 or all(a % per_minibatch == 0 for a in after)  # noqa: E731
    return running_counter(grads, accumulation, aligned, f"minibatches of {per_minibatch}", "minibatches")


def every_microbatch_applied(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Every micro-batch's backward reaches an optimizer step in its own update; no step mixes updates;
    each step applies exactly its micro-batches' gradients (clipped to max_grad_norm when that is set)."""
    check = Check(case.id)
    obs = cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=case.param("epochs", 2)))
    view = require_view(obs, check)  # also: the trainer did not raise, and ran the expected micro-batches
    if view is None:
        return check.finish()
    grads, spec = obs.ran.grads, obs.spec
    per_update = len(spec.expected_rows())
    for u in range(spec.total_updates):
        n_back = sum(1 for c in grads.backwards if view.update_at(c) == u)
        n_steps = sum(1 for s in grads.steps if view.update_at(s.clock) == u)
        if n_back != per_update or n_steps != spec.steps_per_update:
            check.fail(f"update {u + 1}: {n_back} backward passes and {n_steps} optimizer steps, "
                       f"expected {per_update} and {spec.steps_per_update}")  # fmt: skip
    tol = tolerance("gradient", spec.dtype, TOLERANCES)
    for k, step in enumerate(grads.steps):
        owners = {view.update_at(grads.backwards[i]) for i in step.backward_ids}
        if owners != {view.update_at(step.clock)}:
            check.fail(f"step {k + 1} (update {view.update_at(step.clock) + 1}) applied backward passes of updates "
                       f"{sorted(o + 1 for o in owners)}")  # fmt: skip
        limit = None if spec.max_grad_norm is None else spec.max_grad_norm * (1 + tol.rel_tol) + tol.abs_tol
        if limit is not None and step.applied_norm > limit:
            check.fail(f"step {k + 1}: applied gradient norm {step.applied_norm:.6g} exceeds max_grad_norm "
                       f"{spec.max_grad_norm}")  # fmt: skip
    if grads.unapplied:
        check.fail(f"{len(grads.unapplied)} backward pass(es) never reached an optimizer step")
    counter = minibatch_counter(grads, AccumulationSlots.of(spec).per_pass, spec.gradient_accumulation_steps)
    if counter is not None:
        check.diagnose(counter)
    gaps = [(f"step {k + 1}", applied_gap(step, spec.max_grad_norm)) for k, step in enumerate(grads.steps)]
    largest_gap(check, gaps, spec.dtype, TOLERANCES)
    return check.finish()


LOGP_GRADIENT_RUNS = {"lr0_uneven": (4, 3), "lr0_even": (2, 6), "uneven_split": None}
"""The runs whose dL/dlogp is checked: the LR-0 cuts 4+2 and 2+2+2 (gradient_partition's runs), and the
uneven split at LR 1e-3 over two epochs (ratios off 1, some clipped)."""


def logp_gradient(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """dL/dlogp_new of every token of every micro-batch equals the formula: -A * rho / N_R(minibatch) where the
    unclipped branch is live, else 0; and dL/dv_new at the value head's output vf_coef * (v - G) / N_V(minibatch)
    where the unclipped square is live, else 0 (docs/metrics.md, "The update"); independent of the cut."""
    check, cut = Check(case.id), LOGP_GRADIENT_RUNS[case.param("run", "uneven_split")]
    if cut is None:
        spec = spec_for(UNEVEN, run).with_(num_ppo_epochs=2)
    else:
        spec = spec_for(LR0, run).with_(name="gradient_partition", per_device_train_batch_size=cut[0],
                                        gradient_accumulation_steps=cut[1])  # fmt: skip
    obs = cache.get(spec)
    view = require_view(obs, check)
    if view is None:
        return check.finish()
    per_minibatch = AccumulationSlots.of(obs.spec).per_pass
    scores = update_scores(obs.ran, view.updates)
    for update, score in zip(view.updates, scores):
        for logged, expected, note in (
            gradients.expectation(update, per_minibatch, obs.spec.cliprange, obs.spec.dtype),
            value_gradients.expectation(update, obs.spec, score, per_minibatch),
        ):
            where = f"{obs.spec.split_label} update {update.index + 1}"
            verdicts = list(compare(logged, expected, obs.spec.dtype, TOLERANCES, kind="formula", where=where))
            check.absorb(verdicts)
            if note and any(v.failed for v in verdicts) and note not in check.notes:
                check.note(note)
    return check.finish()


def single_steps(obs, check: Check) -> list | None:
    """The step gradients of a run whose every minibatch is one micro-batch, or None after failing the check."""
    steps = obs.ran.grads.steps
    if any(len(step.backward_ids) != 1 for step in steps):
        check.fail(f"{obs.spec.split_label} vf_coef={obs.spec.vf_coef:g}: a step applied other than one backward pass")
        return None
    return [step.local_grad for step in steps]


def gradient_decomposition(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At LR 0, each step's gradient is sum_i (n_R,i / N_R) g_i^pg + vf_coef * sum_i (n_V,i / N_V) g_i^vf, the g_i
    measured as steps of their own (same rows as minibatches of one micro-batch); see decomposition.py."""
    check = Check(case.id)
    base = spec_for(LR0, run).with_(name="gradient_decomposition", per_device_train_batch_size=decomposition.ROWS,
                                    gradient_accumulation_steps=LR0.local_batch_size // decomposition.ROWS)  # fmt: skip
    with grad_copies():  # the steps' sums of contributions are what it compares
        a = cache.get(base.with_(vf_coef=1.0))
        singles = [cache.get(base.with_(num_mini_batches=base.gradient_accumulation_steps, vf_coef=c))
                   for c in (0.0, 1.0)]  # fmt: skip
    views = [require_view(obs, check) for obs in (a, *singles)]
    if any(v is None for v in views):
        return check.finish()
    try:
        counts = decomposition.same_rows(views[0].updates[0], views[1].updates[0])
        decomposition.same_rows(views[0].updates[0], views[2].updates[0])
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return check.finish()
    policy, both = single_steps(singles[0], check), single_steps(singles[1], check)
    if policy is None or both is None:
        return check.finish()
    try:
        value = [g - p for g, p in zip(both, policy)]
        want = decomposition.expected_steps(counts, policy, value, AccumulationSlots.of(a.spec).per_pass)
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return check.finish()
    steps = a.ran.grads.steps
    if len(steps) != len(want):
        check.fail(f"{a.spec.split_label}: {len(steps)} optimizer steps, expected {len(want)}")
        return check.finish()
    gaps = [(f"{a.spec.split_label} step {k + 1}", decomposition.relative_gap(step.local_grad, w))
            for k, (step, w) in enumerate(zip(steps, want))]  # fmt: skip
    largest_gap(check, gaps, run.dtype, TOLERANCES, "gradient/decomposition")
    return check.finish()


GRADIENT_SCENARIOS = (
    Scenario("gradient_partition", gradient_partition, (), "LR 0: the step gradient does not depend on the cut"),
    Scenario(
        "every_microbatch_applied",
        every_microbatch_applied,
        (("epochs", (2,)),),
        "each backward reaches a step of its own update; .grad is exactly its micro-batches'",
    ),  # fmt: skip
    Scenario(
        "logp_gradient",
        logp_gradient,
        (("run", tuple(LOGP_GRADIENT_RUNS)),),
        "dL/dlogp_new == -A * rho / N_R and dL/dv == vf_coef * (v - G) / N_V per token on the live branch, else 0",
    ),  # fmt: skip
    Scenario(
        "gradient_decomposition",
        gradient_decomposition,
        (),
        "LR 0: a step's gradient == its micro-batches' own, weighted by their R and V token counts",
    ),  # fmt: skip
)
