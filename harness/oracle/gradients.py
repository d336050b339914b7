"""What every algorithm's gradient checks share: the factors of a recorded gradient against its formula, the
gradient a step should apply, the class-15 diagnosis of the steps' positions, and the largest gap as a metric.

None of it depends on an algorithm's records: the factors are numbers, and the steps are those of the
gradient recorder's trace (`harness.instrument.grad.GradTrace`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from harness.compare import compare
from harness.tolerances import ToleranceTable
from harness.verdict import Check, Diagnosis

Factor = tuple[float, int, int]
"""(<recorded, formula> / <formula, formula>, tokens of the micro-batch, tokens of what it is part of)."""


def _same(values: list[float]) -> bool:
    return bool(values) and max(values) - min(values) <= 1e-3 * max(abs(v) for v in values)


def factor_note(factors: list[Factor], what: str = "dL/dlogp", whole: str = "minibatch") -> str:
    """What a failure of the gradient `what` looks like as factors: one common factor; each micro-batch's own
    token mean times one factor (a mean of micro-batch means); or neither, the factors listed. `whole`: what
    the micro-batches make up (PPO's minibatch of one optimizer step; GRPO's accumulation window)."""
    finite = [(f, n, total) for f, n, total in factors if f == f and n > 0]
    if not finite:
        return ""
    ratios = [f for f, _, _ in finite]
    if _same(ratios):
        return f"the recorded {what} is {ratios[0]:.4g} times the formula's in every micro-batch (a common factor)"
    own = [f * n / total for f, n, total in finite]
    if _same(own):
        return (
            f"the recorded {what} is {own[0]:.4g} (1/{1 / own[0]:.4g}) times each micro-batch's own token mean's, "
            f"not the {whole}'s: a mean of micro-batch means"
        )
    listed = ", ".join(f"{f:.4g}" for f in ratios)
    return f"recorded {what} over the formula's, per micro-batch: {listed}"


def reduction(steps: Sequence, where: str, check: Check, table: ToleranceTable, dtype: str = "float32"
              ) -> float | None:  # fmt: skip
    """The factor `a` of one optimizer step seen by every rank (`steps`: each rank's `Step` of it, from its
    gradient trace kept with the .grad copies): every rank's `.grad` must be one vector, `a` times the sum over
    ranks of their own backward contributions (`a` = 1 / world when data parallelism averages, 1 when it
    sums). A micro-batch whose backward ran outside the synchronised one (no_sync on the wrong micro-batch, or
    on every one) leaves a part of `.grad` that no `a` explains. The largest gap from it, and between the
    ranks' `.grad`, is reported as a "gradient" metric (judged by `table`, the algorithm's tolerances); None (a
    failure) when no rank contributed."""
    grads = [s.grad for s in steps]
    total = torch.stack([s.local_grad for s in steps]).sum(dim=0)
    norm = float((total * total).sum())
    if not norm > 0:
        check.fail(f"{where}: no process contributed a gradient")
        return None
    a = float((grads[0] * total).sum()) / norm
    peak = max(float(grads[0].abs().max()), 1e-30)
    spread = max(float((g - grads[0]).abs().max()) for g in grads) / peak
    left = float((grads[0] - a * total).abs().max()) / peak
    gap = {"gradient": max(spread, left)}
    check.absorb(compare(gap, {"gradient": 0.0}, dtype, table, kind="gradient", where=where))
    return a


def reductions(ranks: Sequence, steps: int, check: Check, table: ToleranceTable) -> list[float] | None:
    """Every rank's optimizer steps (`ranks`: each rank's `Ran`, its gradient trace kept with the .grad copies)
    reduced alike, by `reduction` (judged by `table`); their factors `a`, noted, or None where a rank made other
    than `steps` steps or no rank contributed to one (each a failure of `check`)."""
    if any(len(r.grads.steps) != steps for r in ranks):
        check.fail(f"ranks made {[len(r.grads.steps) for r in ranks]} optimizer steps, expected {steps} each")
        return None
    per_step = enumerate(zip(*(r.grads.steps for r in ranks)))
    factors = [reduction(each, f"step {k + 1}", check, table) for k, each in per_step]
    if any(a is None for a in factors):
        return None
    check.note(f"reduction across {len(ranks)} ranks: .grad = {factors[0]:.4g} x the sum of their gradients")
    return factors


def applied_gap(step, max_grad_norm: float | None) -> float:
    """How far the step's .grad is from what it should apply: its micro-batches' gradients, clipped when asked.

    Unclipped: the relative gap to their sum. Clipped (by global norm, as torch's clip_grad_norm_): the
    part no rescaling explains, plus how far the rescaling is from max_grad_norm / |sum| (capped at 1).
    """
    if max_grad_norm is None:
        return step.unexplained
    want = min(1.0, max_grad_norm / (step.raw_norm + 1e-6))
    return max(step.residual, abs(step.coefficient - want) / want)


def step_ends(grads) -> list[int]:
    """After how many backward passes, counted across the run, each optimizer step came (0: after none)."""
    return [max(step.backward_ids) + 1 if step.backward_ids else 0 for step in grads.steps]


def running_counter(
    grads, accumulation: int, aligned: Callable[[list[int]], bool], ends: str, parts: str
) -> Diagnosis | None:
    """The class-15 diagnosis, or None: the steps are not where they belong (`aligned(step_ends)` is false), and
    each came after a multiple of `accumulation` backward passes counted across the run: an accumulation
    counter never reset at the end of one of the `parts` (minibatches, windows). `ends` names where the steps
    belong, for its formula. A step after no backward pass is no counter's: no diagnosis then."""
    after = step_ends(grads)
    if not after or aligned(after) or accumulation < 1 or any(a == 0 or a % accumulation for a in after):
        return None
    listed = ", ".join(str(a) for a in after[:-1]) + (" and " if len(after) > 1 else "") + str(after[-1])
    said = (
        f"steps after micro-batches {listed} (counted across the run), not at the ends of {ends}: an accumulation "
        f"counter running across {parts}"
    )
    return Diagnosis((15,), said, math.nan, math.nan)


def _badness(item: tuple[str, float]) -> float:
    """A gap's rank among the gaps: its size, a NaN above every number."""
    return item[1] if item[1] == item[1] else float("inf")


def largest_gap(check: Check, gaps: Sequence[tuple[str, float]], dtype: str, table: ToleranceTable,
                metric: str = "gradient", none: str | None = None) -> None:  # fmt: skip
    """Report the largest relative gradient gap of a check, and its tolerance (`metric`'s row in `table`, the
    algorithm's tolerances), as the metric `metric` (it fails above the tolerance; a NaN gap is the largest, and
    fails). `none`: what the check fails with when there is no gap at all (None: nothing is reported then)."""
    if not gaps:
        if none is not None:
            check.fail(none)
        return
    where, gap = max(gaps, key=_badness)
    check.absorb(compare({metric: gap}, {metric: 0.0}, dtype, table, kind="gradient", where=where))
