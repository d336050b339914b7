"""Name the bug, not only the gap: which known wrong pooling reproduces a failing metric's logged value.

Algorithm-neutral. An algorithm computes, from the same records as its oracle, what each
known wrong way of pooling would have logged (`Candidate`s: classes of docs/bug-catalogue.md,
a one-line formula, the value); `diagnose` picks the candidate that reproduces the logged
value within the metric's own tolerance (the one its comparison used: derived from the recorded
terms, harness/oracle/precision.py, or the row of its algorithm's table), or says that none does. It never
guesses: among the reproducing candidates with the fewest departures from the correct
pooling, all must name the same classes, else there is no diagnosis.

A pass is diagnosed too where its tolerance was derived: when a known wrong formula reproduces the
logged value within one honest rounding and the contract's value misses it by several
(`precision.fits_better`), the metric fails with that formula named, however wide the tolerance is.
A pass is then never a case that a known bug explains better than the contract.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .oracle.precision import FIT_RATIO, fits_better
from .tolerances import ToleranceTable, tolerance
from .verdict import Diagnosis, MetricStatus, MetricVerdict, Wording

NO_MATCH = "no known pooling reproduces it"


@dataclass(frozen=True)
class Candidate:
    """What one known wrong pooling gives for a metric, computed by the oracle from the records.

    `departures` counts the wrong steps it takes (a combination of two classes takes two); the
    simplest reproducing explanation wins.
    """

    classes: tuple[int, ...]
    formula: str
    value: float
    source: str = ""
    departures: int = 1


def diagnose(verdict: MetricVerdict, candidates: Iterable[Candidate], dtype: str, table: ToleranceTable
             ) -> tuple[Diagnosis | None, str]:  # fmt: skip
    """(the candidate that reproduces `verdict.logged`, '') or (None, why not); `table`: the tolerances of the
    algorithm `verdict` was judged for."""
    if verdict.status is not MetricStatus.FAIL or verdict.logged is None or not math.isfinite(verdict.logged):
        return None, ""
    if verdict.precision is not None:
        allowed = verdict.precision.bound
    else:
        tol = tolerance(verdict.name, dtype, table)
        allowed = lambda value: tol.allowed(value, verdict.scale)  # noqa: E731
    matches = [
        c
        for c in candidates
        if c.value is not None and math.isfinite(c.value) and abs(verdict.logged - c.value) <= allowed(c.value)
    ]
    return pick(verdict, matches)


def pick(verdict: MetricVerdict, matches: Sequence[Candidate]) -> tuple[Diagnosis | None, str]:
    """The simplest of the reproducing candidates `matches`, when they name one set of classes; else why none."""
    if not matches:
        return None, NO_MATCH
    fewest = min(c.departures for c in matches)
    best = [c for c in matches if c.departures == fewest]
    named = {tuple(sorted(c.classes)) for c in best}
    if len(named) > 1:
        listed = " / ".join(f"{c.formula}" for c in best)
        return None, f"{NO_MATCH} unambiguously ({listed} all do)"
    chosen = min(best, key=lambda c: abs(verdict.logged - c.value))
    gap = abs(verdict.logged - chosen.value)
    return Diagnosis(chosen.classes, chosen.formula, chosen.value, gap, chosen.source), ""


def worth_a_look(verdict: MetricVerdict) -> bool:
    """Whether a passing verdict's gap is wide enough for a wrong formula to fit it better (`fits_better`): its
    tolerance was derived, and the contract's value misses the logged one by more than FIT_RATIO roundings."""
    p = verdict.precision
    if verdict.status is not MetricStatus.PASS or p is None or verdict.logged is None or verdict.expected is None:
        return False
    return abs(verdict.logged - verdict.expected) > FIT_RATIO * p.resolution(verdict.expected)


def better_fit(verdict: MetricVerdict, candidates: Iterable[Candidate]) -> MetricVerdict:
    """A passing `verdict` turned into a failure when a known wrong formula explains its logged value and the
    contract's value does not (`fits_better`); unchanged otherwise."""
    fitting = [
        c
        for c in candidates
        if c.value is not None and fits_better(verdict.precision, verdict.logged, verdict.expected, c.value)
    ]
    diagnosis, _ = pick(verdict, fitting)
    if diagnosis is None:
        return verdict
    right = abs(verdict.logged - verdict.expected)
    reason = (f"fit: within tolerance {verdict.tol:.3g}, but the contract's value misses the logged one by "
              f"{right:.3g} and a known wrong formula reproduces it to {diagnosis.gap:.3g}")  # fmt: skip
    return replace(verdict, status=MetricStatus.FAIL, reason=reason, diagnosis=diagnosis, wording=Wording.FIT)


def diagnosed(
    verdicts: Sequence[MetricVerdict],
    candidates: Mapping[str, Callable[[], Sequence[Candidate]]],
    dtype: str,
    table: ToleranceTable,
) -> list[MetricVerdict]:
    """`verdicts` with a diagnosis (or the reason for none) on each plain fail that has a candidate list, and
    each pass that a candidate explains better failed and diagnosed (`better_fit`).

    `candidates` maps a metric name to a function computing its candidates (called only when it failed).
    A metric without an entry is left as it is. `table`: the tolerances of the algorithm they were judged for.
    """
    out = []
    for verdict in verdicts:
        make = candidates.get(verdict.name)
        look = worth_a_look(verdict)
        if make is None or not (verdict.status is MetricStatus.FAIL or look):
            out.append(verdict)
            continue
        try:
            found = list(make())
        except Exception as why:  # noqa: BLE001 - a diagnosis never turns a verdict into an error
            out.append(replace(verdict, diagnosis_reason=f"not diagnosed: {type(why).__name__}: {why}"))
            continue
        if look:
            out.append(better_fit(verdict, found))
            continue
        diagnosis, reason = diagnose(verdict, found, dtype, table)
        out.append(replace(verdict, diagnosis=diagnosis, diagnosis_reason=reason))
    return out
