"""Name the bug, not only the gap: which known wrong pooling reproduces a failing metric's logged value.

Algorithm-neutral. An algorithm computes, from the same records as its oracle, what each
known wrong way of pooling would have logged (`Candidate`s: classes of docs/bug-catalogue.md,
a one-line formula, the value); `diagnose` picks the candidate that reproduces the logged
value within the metric's own tolerance (`tolerances.py`), or says that none does. It never
guesses: among the reproducing candidates with the fewest departures from the correct
pooling, all must name the same classes, else there is no diagnosis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .tolerances import tolerance
from .verdict import Diagnosis, MetricStatus, MetricVerdict

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


def diagnose(verdict: MetricVerdict, candidates: Iterable[Candidate], dtype: str) -> tuple[Diagnosis | None, str]:
    """(the candidate that reproduces `verdict.logged`, '') or (None, why not)."""
    if verdict.status is not MetricStatus.FAIL or verdict.logged is None or not math.isfinite(verdict.logged):
        return None, ""
    tol = tolerance(verdict.name, dtype)
    matches = [
        c
        for c in candidates
        if c.value is not None
        and math.isfinite(c.value)
        and abs(verdict.logged - c.value) <= tol.allowed(c.value, verdict.scale)
    ]
    if not matches:
        return None, NO_MATCH
    fewest = min(c.departures for c in matches)
    best = [c for c in matches if c.departures == fewest]
    named = {tuple(sorted(c.classes)) for c in best}
    if len(named) > 1:
        listed = " / ".join(f"{c.formula}" for c in best)
        return None, f"{NO_MATCH} unambiguously ({listed} all do)"
    pick = min(best, key=lambda c: abs(verdict.logged - c.value))
    return Diagnosis(pick.classes, pick.formula, pick.value, abs(verdict.logged - pick.value), pick.source), ""


def diagnosed(
    verdicts: Sequence[MetricVerdict],
    candidates: Mapping[str, Callable[[], Sequence[Candidate]]],
    dtype: str,
) -> list[MetricVerdict]:
    """`verdicts` with a diagnosis (or the reason for none) on each plain fail that has a candidate list.

    `candidates` maps a metric name to a function computing its candidates (called only when it failed).
    A metric without an entry is left as it is.
    """
    out = []
    for verdict in verdicts:
        make = candidates.get(verdict.name)
        if make is None or verdict.status is not MetricStatus.FAIL:
            out.append(verdict)
            continue
        try:
            found = list(make())
        except Exception as why:  # noqa: BLE001 - a diagnosis never turns a verdict into an error
            out.append(replace(verdict, diagnosis_reason=f"not diagnosed: {type(why).__name__}: {why}"))
            continue
        diagnosis, reason = diagnose(verdict, found, dtype)
        out.append(replace(verdict, diagnosis=diagnosis, diagnosis_reason=reason))
    return out
