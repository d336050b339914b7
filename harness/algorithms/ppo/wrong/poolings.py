"""The known wrong ways to pool a PPO statistic, as data: what each would have logged, from the records alone.

Two small tables. `PARTS` (parts.py) says what each micro-batch contributes (a value and a weight: the
correct one is its token sum over the metric's mask and that mask's count; class 5 takes
every position, pads included; class 6 the response mask for value statistics; ...).
`POOLERS` says how the parts become one number (the correct one divides the summed values by
the summed weights once; class 1 averages the part means; class 2 averages them over every
accumulation slot of the minibatch, zeros in the slots nobody wrote; ...). Every pairing of an
entry of each with at most two departures from the correct one is a candidate
(`harness.diagnose.Candidate`); adding a class is adding one entry. `diagnose` then picks
the candidate that reproduces the logged value, or none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from harness.diagnose import Candidate, diagnosed
from harness.verdict import MetricVerdict

from ..contract import POOLED_MEANS, RATIO_VAR, RATIO_VAR_OF
from ..oracle.parts import PARTS, Part, PartRule, correct
from ..spec import ScenarioSpec
from ..tolerances import TOLERANCES
from ..view import MicroBatchView


@dataclass(frozen=True)
class AccumulationSlots:
    """What the accumulation buffers of a split look like: slots per minibatch, minibatch passes, parts (micro-batches)
    per pass."""

    slots: int
    """gradient_accumulation_steps: the slots a (epochs, minibatches, accumulation) stats buffer has per minibatch."""
    passes: int
    """num_ppo_epochs * num_mini_batches."""
    per_pass: int
    """Micro-batches per minibatch (the slots written)."""

    @classmethod
    def of(cls, spec: ScenarioSpec) -> AccumulationSlots:
        passes = spec.num_ppo_epochs * spec.num_mini_batches
        return cls(spec.gradient_accumulation_steps, passes, len(spec.expected_rows()) // max(passes, 1))


# ---------------------------------------------------------------------------- what each micro-batch contributes


# ---------------------------------------------------------------------------- how the parts are pooled


def _means(parts: Sequence[Part]) -> list[float]:
    return [v / w if w else 0.0 for v, w in parts]


def _slotted(parts: Sequence[Part], geo: AccumulationSlots) -> list[float] | None:
    """Every accumulation slot of every minibatch pass: the part means where written, zeros elsewhere."""
    if geo.per_pass >= geo.slots or len(parts) != geo.passes * geo.per_pass:
        return None
    means, slots = _means(parts), []
    for p in range(geo.passes):
        slots += means[p * geo.per_pass : (p + 1) * geo.per_pass] + [0.0] * (geo.slots - geo.per_pass)
    return slots


def _mean(xs: list[float] | None) -> float | None:
    return None if not xs else float(torch.tensor(xs, dtype=torch.float64).mean())


def _var(xs: list[float] | None, ddof: int) -> float | None:
    return None if xs is None or len(xs) < 2 else float(torch.tensor(xs, dtype=torch.float64).var(correction=ddof))


def _token(parts: Sequence[Part]) -> float | None:
    weight = sum(w for _, w in parts)
    return sum(v for v, _ in parts) / weight if weight else 0.0


@dataclass(frozen=True)
class Pooler:
    """One way parts become the logged number: classes, formula (with {part}), value (None: not applicable)."""

    classes: tuple[int, ...]
    formula: str
    value: Callable[[Sequence[Part], AccumulationSlots], float | None]
    departures: int = 1


MEAN_POOLERS: tuple[Pooler, ...] = (
    Pooler((), "{alone}", lambda parts, geo: _token(parts), 0),
    Pooler((1,), "equal-weight mean of {part}",
           lambda parts, geo: _mean([v / w for v, w in parts if w]) if len(parts) > 1 else None),
    Pooler((2,), "mean over every accumulation slot (gradient_accumulation_steps per minibatch) of {part}, "
                 "zeros in unwritten slots", lambda parts, geo: _mean(_slotted(parts, geo))),
    Pooler((11,), "last micro-batch's {part}",
           lambda parts, geo: _means(parts)[-1] if len(parts) > 1 else None),
    Pooler((10,), "{alone} / gradient_accumulation_steps",
           lambda parts, geo: _token(parts) / geo.slots if geo.slots > 1 else None),
    Pooler((10,), "{alone} * micro-batches per minibatch",
           lambda parts, geo: _token(parts) * geo.per_pass if geo.per_pass > 1 else None),
    Pooler((10,), "{alone} / micro-batches per minibatch",
           lambda parts, geo: _token(parts) / geo.per_pass if geo.per_pass > 1 else None),
)  # fmt: skip
"""How a pooled mean's parts are pooled. The first entry is the correct one."""

VARIANCE_POOLERS: tuple[Pooler, ...] = (
    Pooler((), "unbiased variance of {part}", lambda parts, geo: _var([v / w for v, w in parts if w], 1), 0),
    Pooler((), "biased variance (ddof 0) of {part}", lambda parts, geo: _var([v / w for v, w in parts if w], 0)),
    Pooler((2,), "unbiased variance over every accumulation slot of {part}, zeros in unwritten slots",
           lambda parts, geo: _var(_slotted(parts, geo), 1)),
    Pooler((11,), "variance of the last micro-batch's mean alone (0)",
           lambda parts, geo: 0.0 if len(parts) > 1 else None),
)  # fmt: skip
"""How val/ratio_var's parts (the ratio's, per micro-batch) are pooled. The first entry is the correct one."""


def combine(rule: PartRule, pooler: Pooler, parts: Sequence[Part], geo: AccumulationSlots) -> Candidate | None:
    """The candidate of `rule` pooled by `pooler`: None when it is the correct pooling, or not applicable."""
    departures = (1 if rule.classes else 0) + pooler.departures
    if departures == 0 or departures > 2:
        return None
    value = pooler.value(parts, geo)
    if value is None:
        return None
    classes = tuple(dict.fromkeys(rule.classes + pooler.classes))
    formula = pooler.formula.format(part=rule.part, alone=rule.alone)
    return Candidate(classes, formula, value, rule.source, departures)


STALE = (8,)
"""Class 8: the previous update's micro-batches pooled into this update's numbers (a buffer never reset)."""


def candidates(name: str, micros: Sequence[MicroBatchView], geo: AccumulationSlots,
               earlier: Sequence[MicroBatchView] = ()) -> list[Candidate]:  # fmt: skip
    """Every candidate for metric `name` (a pooled mean or val/ratio_var) over `micros`.

    A part rule that gives every micro-batch the correct part changes nothing and makes no candidate.
    `earlier`: the previous update's micro-batches, when there is one: the correct pooling over them
    and `micros` together is the class-8 candidate.
    """
    of = RATIO_VAR_OF if name == RATIO_VAR else name
    metric = next(m for m in POOLED_MEANS if m.name == of)
    poolers = VARIANCE_POOLERS if name == RATIO_VAR else MEAN_POOLERS
    right = [correct(metric, micro) for micro in micros]
    out = []
    for rule in PARTS:
        if not rule.applies(metric):
            continue
        parts = [rule.make(metric, micro) for micro in micros]
        if rule.classes and parts == right:
            continue
        out += [c for pooler in poolers if (c := combine(rule, pooler, parts, geo)) is not None]
    if earlier:
        stale = [correct(metric, micro) for micro in earlier] + right
        value = poolers[0].value(stale, geo)
        if value is not None:
            formula = poolers[0].formula.format(part=PARTS[0].part, alone=PARTS[0].alone)
            out.append(Candidate(STALE, f"{formula} over this update's and the previous update's micro-batches",
                                 value, "Pooled sums and counts of both updates"))  # fmt: skip
    return out


def identity_candidates(name: str, spec: ScenarioSpec) -> list[Candidate]:
    """At LR 0 (no records needed): every micro-batch's ratio mean is exactly 1, at every position too."""
    if name not in (RATIO_VAR_OF, RATIO_VAR):
        return []
    geo = AccumulationSlots.of(spec)
    parts = [(float(rows), float(rows)) for rows in spec.expected_rows()]
    poolers = VARIANCE_POOLERS if name == RATIO_VAR else MEAN_POOLERS
    return [c for pooler in poolers if (c := combine(PARTS[0], pooler, parts, geo)) is not None]


# ---------------------------------------------------------------------------- entry points for the scenarios


def diagnose_pooled(verdicts: Sequence[MetricVerdict], micros: Sequence[MicroBatchView],
                    spec: ScenarioSpec, earlier: Sequence[MicroBatchView] = ()) -> list[MetricVerdict]:  # fmt: skip
    """The pooled-metric verdicts of one update with a diagnosis on each failure (`earlier`: the previous update's)."""
    geo = AccumulationSlots.of(spec)
    names = [m.name for m in POOLED_MEANS] + [RATIO_VAR]
    return diagnosed(
        verdicts, {n: (lambda n=n: candidates(n, micros, geo, earlier)) for n in names}, spec.dtype, TOLERANCES
    )


def diagnose_identities(verdicts: Sequence[MetricVerdict], spec: ScenarioSpec) -> list[MetricVerdict]:
    """The LR-0 identity verdicts with a diagnosis on each failure (from the spec's geometry alone)."""
    names = (RATIO_VAR_OF, RATIO_VAR)
    return diagnosed(verdicts, {n: (lambda n=n: identity_candidates(n, spec)) for n in names}, spec.dtype, TOLERANCES)
