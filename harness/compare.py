"""Compare logged metrics with expectations: a `MetricVerdict` each, never prose about why.

A metric missing from the log, or logged as NaN or inf, is never a pass. The tolerance is derived from
the arithmetic behind the expected value where the oracle knows it (`Expectation.precision`: the dtype the
trainer held the pooled terms in, their number and size; harness/oracle/precision.py), else the metric's own
row, for the run's dtype, in the tolerance table of the algorithm it is judged for (`tolerances.py`: the shared
rows and that algorithm's own); each verdict says which (`tol_source`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .oracle.numbers import as_float
from .oracle.pooling import Expectation
from .tolerances import Tolerance, ToleranceTable, close, dtype_name, tolerance
from .verdict import MetricStatus, MetricVerdict


def as_expectation(metric: str, want: Expectation | float) -> Expectation:
    """An `Expectation` from an oracle entry or a plain number (an identity, another run's log)."""
    if isinstance(want, Expectation):
        return want
    value = as_float(want)
    return Expectation(metric, value, None if value is not None else f"expected value {want!r} is not a number")


def compare_one(
    metric: str,
    logged: Mapping[str, Any],
    want: Expectation,
    tol: Tolerance,
    kind: str,
    where: str | None,
    dtype: Any = "",
) -> MetricVerdict:
    """One metric's verdict; `kind` names what it is compared with (oracle, identity, partition); `tol` is the
    table's row (of `dtype`), used where `want` carries no precision."""
    base = {"name": metric, "expected": want.value, "where": where, "required": want.required}
    if metric not in logged:
        return MetricVerdict(status=MetricStatus.MISSING, reason=f"{metric} is not in the logged metrics", **base)
    value = as_float(logged[metric])
    if value is None or not math.isfinite(value):
        reason = f"logged value {logged[metric]!r} is not a finite number"
        return MetricVerdict(status=MetricStatus.NAN, logged=value, reason=reason, **base)
    if want.value is None:
        reason = want.reason or "no reason given"
        return MetricVerdict(status=MetricStatus.NOT_RECOMPUTABLE, logged=value, reason=reason, **base)
    if not math.isfinite(want.value):
        reason = f"the {kind} value {want.value!r} is not finite"
        return MetricVerdict(status=MetricStatus.NAN, logged=value, reason=reason, **base)
    gap = abs(value - want.value)
    rel = gap / abs(want.value) if want.value != 0 else (0.0 if gap == 0 else math.inf)
    if want.precision is not None:
        allowed, source = want.precision.bound(want.value), want.precision.describe()
        ok = gap <= allowed
    else:
        allowed, source = tol.allowed(want.value, want.scale), f"the {dtype_name(dtype)} row of {metric}"
        ok = close(value, want.value, tol, want.scale)
    return MetricVerdict(
        status=MetricStatus.PASS if ok else MetricStatus.FAIL,
        logged=value,
        abs_err=gap,
        rel_err=rel,
        tol=allowed,
        scale=want.scale,
        reason="" if ok else f"{kind}: gap {gap:.3g} exceeds tolerance {allowed:.3g}",
        tol_source=source,
        precision=want.precision,
        **base,
    )


def compare(
    logged: Mapping[str, Any],
    expected: Mapping[str, Expectation | float],
    dtype: Any,
    table: ToleranceTable,
    kind: str = "oracle",
    where: str | None = None,
) -> list[MetricVerdict]:
    """Each expected metric (an `Expectation` or a number) against the logged one, in `expected`'s order; `table`:
    the tolerances of the algorithm the metrics are judged for."""
    return [
        compare_one(metric, logged, as_expectation(metric, want), tolerance(metric, dtype, table), kind, where, dtype)
        for metric, want in expected.items()
    ]
