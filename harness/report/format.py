"""How verdicts read to people: numbers, the one-line failure of a metric, its diagnosis, a check's lines.

The model (harness/verdict.py) holds what was found; every renderer (terminal, Markdown, pytest's
failure message) writes it through these functions, so a failure reads the same everywhere.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from harness.verdict import MetricStatus

if TYPE_CHECKING:
    from harness.verdict import CheckResult, Diagnosis, MetricVerdict

COMPARED = re.compile(r"^(?:[\w ]+: gap \S+ exceeds tolerance \S+|fit: .*)$")
"""The reason harness/compare.py gives a plain fail. A fail whose reason has another form carries the check's own
words for what it compared (e.g. the token of a gradient gap): its failure line prints those words instead. A fail
by fit (harness/diagnose.py, `better_fit`: inside the tolerance, but a known wrong formula explains the logged value)
prints the numbers and then its reason."""
NOTED = re.compile(r"\(class \d+(?: \+ \d+)*\)$")
"""A check note that is a diagnosis ends by naming its class: "...: <what it is> (class 15)"."""


def fmt(value: Any) -> str:
    """A number for people: 6 significant digits; 'n/a' for None."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.6g}"


def failure_line(scenario: str, metric: MetricVerdict) -> str:
    """`FAIL <scenario> <metric>: logged=<v> expected=<v> gap=<abs> (rel <r>, tol <t>)`, one pasteable line.

    Statuses other than a plain fail (missing, nan, not_recomputable) add `[status: reason]`; a plain fail whose
    reason is the check's own words (not compare's, `COMPARED`) reads `FAIL <scenario> <metric>: <words>`.
    """
    if metric.status is MetricStatus.FAIL and metric.reason and not COMPARED.match(metric.reason):
        return f"FAIL {scenario} {metric.label}: {metric.reason}"
    logged = "missing" if metric.status is MetricStatus.MISSING else fmt(metric.logged)
    line = (
        f"FAIL {scenario} {metric.label}: logged={logged} expected={fmt(metric.expected)} "
        f"gap={fmt(metric.abs_err)} (rel {fmt(metric.rel_err)}, tol {fmt(metric.tol)}{tol_from(metric)})"
    )
    if metric.status is MetricStatus.FAIL and metric.reason.startswith("fit: "):
        line += f" [{metric.reason}]"
    if metric.status is not MetricStatus.FAIL:
        line += f" [{metric.status.value}: {metric.reason or 'no reason given'}]"
    return line


def tol_from(metric: MetricVerdict) -> str:
    """` from <where the tolerance came from>` (harness/compare.py's `tol_source`), or '' when unknown."""
    return f" from {metric.tol_source}" if metric.tol_source else ""


def diagnosis_text(metric: MetricVerdict) -> str:
    """What the gate says about why `metric` failed: `= <formula> (class N): ...`, the reason there is none, or ''."""
    if metric.diagnosis is not None:
        return metric.diagnosis.line()
    return f"= ? {metric.diagnosis_reason}" if metric.diagnosis_reason else ""


def diagnosis_line(diagnosis: Diagnosis) -> str:
    """`= <formula> (class 5 + 2): <value>, gap <gap>`: what a failure line is followed by. A diagnosis without a
    value (a formula that reproduces many numbers at once, its formula says how closely) is `= <formula> (class 41)`,
    or `= <formula>` when the catalogue has no number for it."""
    named = f"class {' + '.join(str(c) for c in diagnosis.classes)}" if diagnosis.classes else "not in the catalogue"
    if not math.isfinite(diagnosis.value):
        return f"= {diagnosis.formula}" + (f" ({named})" if diagnosis.classes else "")
    return f"= {diagnosis.formula} ({named}): {fmt(diagnosis.value)}, gap {fmt(diagnosis.gap)}"


def noted_diagnosis(result: CheckResult) -> str:
    """The first of a check's notes that is a diagnosis (`NOTED`), as `= <note>`; '' when none is."""
    return next((f"= {note}" for note in result.notes if NOTED.search(note)), "")


def first_diagnosis(result: CheckResult) -> str:
    """The diagnosis a check's one line shows after its first failing metric: that metric's, else the first other
    failing metric's (`; <metric> = <formula> ...`), else the check's diagnosing note (`NOTED`); '' when none."""
    failing = [m for m in result.metrics if m.failed]
    if failing and failing[0].diagnosis is not None:
        return failing[0].diagnosis.line()
    other = next((m for m in failing if m.diagnosis is not None), None)
    if other is not None:
        return f"; {other.label} {other.diagnosis.line()}"
    return noted_diagnosis(result)


def check_failure_lines(result: CheckResult) -> list[str]:
    """A check's problems and each failing metric, one pasteable line each, a diagnosis indented under its metric."""
    lines = [f"FAIL {result.scenario}: {result.message}"] if result.problems else []
    for m in result.metrics:
        if m.failed:
            lines.append(failure_line(result.scenario, m))
            if diagnosis_text(m):
                lines.append("    " + diagnosis_text(m))
    return lines + list(result.contract_changes)
