"""How verdicts read to people: numbers, the one-line failure of a metric, its diagnosis, a check's lines.

The model (harness/verdict.py) holds what was found; every renderer (terminal, Markdown, pytest's
failure message) writes it through these functions, so a failure reads the same everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.verdict import MetricStatus

if TYPE_CHECKING:
    from harness.verdict import CheckResult, Diagnosis, MetricVerdict


def fmt(value: Any) -> str:
    """A number for people: 6 significant digits; 'n/a' for None."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.6g}"


def failure_line(scenario: str, metric: MetricVerdict) -> str:
    """`FAIL <scenario> <metric>: logged=<v> expected=<v> gap=<abs> (rel <r>, tol <t>)`, one pasteable line.

    Statuses other than a plain fail (missing, nan, not_recomputable) add `[status: reason]`.
    """
    logged = "missing" if metric.status is MetricStatus.MISSING else fmt(metric.logged)
    line = (
        f"FAIL {scenario} {metric.label}: logged={logged} expected={fmt(metric.expected)} "
        f"gap={fmt(metric.abs_err)} (rel {fmt(metric.rel_err)}, tol {fmt(metric.tol)})"
    )
    if metric.status is not MetricStatus.FAIL:
        line += f" [{metric.status.value}: {metric.reason or 'no reason given'}]"
    return line


def diagnosis_text(metric: MetricVerdict) -> str:
    """What the gate says about why `metric` failed: `= <formula> (class N): ...`, the reason there is none, or ''."""
    if metric.diagnosis is not None:
        return metric.diagnosis.line()
    return f"= ? {metric.diagnosis_reason}" if metric.diagnosis_reason else ""


def diagnosis_line(diagnosis: Diagnosis) -> str:
    """`= <formula> (class 5 + 2): <value>, gap <gap>`: what a failure line is followed by."""
    named = f"class {' + '.join(str(c) for c in diagnosis.classes)}" if diagnosis.classes else "not in the catalogue"
    return f"= {diagnosis.formula} ({named}): {fmt(diagnosis.value)}, gap {fmt(diagnosis.gap)}"


def check_failure_lines(result: CheckResult) -> list[str]:
    """A check's problems and each failing metric, one pasteable line each, a diagnosis indented under its metric."""
    lines = [f"FAIL {result.scenario}: {result.message}"] if result.problems else []
    for m in result.metrics:
        if m.failed:
            lines.append(failure_line(result.scenario, m))
            if diagnosis_text(m):
                lines.append("    " + diagnosis_text(m))
    return lines
