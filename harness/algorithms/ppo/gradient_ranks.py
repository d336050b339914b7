"""The gradient across data-parallel ranks: what the optimizer applies is the gradient of the global token mean.

Each rank records, at every step, the `.grad` the optimizer sees (after the reduction across ranks) and the
sum of its own backward contributions. Two things are checked, at LR 0, on every step and every rank:

1. The reduction: every rank's `.grad` is one vector, `a` times the sum over ranks of their contributions
   (`a` = 1 / world when data parallelism averages, 1 when it sums). A micro-batch whose backward ran outside
   the synchronised one (no_sync on the wrong micro-batch) leaves a part of `.grad` no `a` explains.
2. The loss: `a` times each rank's recorded dL/dlogp_new equals the formula of gradients.py with N_R the
   response tokens of the minibatch over every rank. A loss without the world-size factor under averaging,
   or divided by this rank's token count instead of the global one, is off.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import Ran
from harness.oracle.expectation import Expectation
from harness.oracle.gradients import reductions
from harness.verdict import Check, CheckId, CheckResult

from . import gradients
from .poolings import AccumulationSlots
from .spec import ScenarioSpec
from .tolerances import TOLERANCES
from .view import UpdateView, run_view

DTYPE = "float32"


def gradients_across_ranks(ranks: Sequence[Ran], spec: ScenarioSpec, check_id: CheckId) -> CheckResult:
    """Steps reduced alike on every rank, and each rank's dL/dlogp against the formula with global counts."""
    check = Check(check_id)
    factors = reductions(ranks, spec.steps_per_update * spec.total_updates, check, TOLERANCES)
    if factors is None:
        return check.finish()
    per_rank = [run_view(r).updates for r in ranks]
    if any(len(u) != spec.total_updates for u in per_rank):
        check.fail(f"spy saw {[len(u) for u in per_rank]} updates per rank, expected {spec.total_updates}")
        return check.finish()
    per_minibatch = AccumulationSlots.of(spec).per_pass
    for index in range(spec.total_updates):
        updates = [u[index] for u in per_rank]
        logged, expected = logp_against_formula(updates, per_minibatch, spec, factors)
        check.absorb(compare(logged, expected, DTYPE, TOLERANCES, kind="formula", where=f"update {index + 1}"))
    return check.finish()


def logp_against_formula(
    updates: Sequence[UpdateView], per_minibatch: int, spec: ScenarioSpec, factors: Sequence[float]
) -> tuple[dict[str, float], dict[str, Expectation]]:
    """The largest gap over every rank of a * recorded dL/dlogp against the formula with global N_R."""
    metric = gradients.METRIC
    try:
        local = [gradients.minibatch_counts(u, per_minibatch) for u in updates]
        if len({len(c) for c in local}) != 1 or len(local[0]) != len(factors) // spec.total_updates:
            raise NotRecomputable(f"minibatches per rank {[len(c) for c in local]}, steps {len(factors)}")
        counts = [sum(c) for c in zip(*local)]
        if max(factors) - min(factors) > 1e-3 * max(abs(f) for f in factors):
            raise NotRecomputable(f"the reduction factor changes from step to step: {factors}")
        found = [gradients.gaps(u, per_minibatch, spec.cliprange, DTYPE, counts, factors[0]) for u in updates]
    except NotRecomputable as why:
        return {metric: 0.0}, {metric: Expectation.unknown(metric, str(why))}
    largest = max(f[0] for f in found)
    scale = sum(f[1] for f in found) / len(found)
    return {metric: largest}, {metric: Expectation(metric, 0.0, scale=scale)}
