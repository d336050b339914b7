"""How verdicts read to people: numbers, the one-line failure of a metric, its diagnosis, a check's lines.

The model (harness/verdict.py) holds what was found, as data: whose words a metric's reason is
(`MetricVerdict.wording`), each diagnosis with its classes. Every surface (the terminal, Markdown, pytest's failure
message, live mode) writes it through these functions, so a failure reads the same everywhere; nothing here reads
the model's prose back.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from harness.verdict import CheckStatus, MetricStatus, Wording

if TYPE_CHECKING:
    from harness.verdict import CheckResult, Diagnosis, MetricVerdict

FAILED = (CheckStatus.FAIL, CheckStatus.ERROR)
"""The statuses of a check that has failure lines."""


def fmt(value: Any) -> str:
    """A number for people: 6 significant digits; 'n/a' for None."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.6g}"


def failure_line(scenario: str, metric: MetricVerdict) -> str:
    """`FAIL <scenario> <metric>: logged=<v> expected=<v> gap=<abs> (rel <r>, tol <t>)`, one pasteable line.

    Statuses other than a plain fail (missing, nan, not_recomputable) add `[status: reason]`; a plain fail by fit
    (`Wording.FIT`) adds `[<reason>]`; a plain fail whose reason is the check's own words (`Wording.CHECK`) reads
    `FAIL <scenario> <metric>: <words>`.
    """
    if metric.status is MetricStatus.FAIL and metric.wording is Wording.CHECK and metric.reason:
        return f"FAIL {scenario} {metric.label}: {metric.reason}"
    logged = "missing" if metric.status is MetricStatus.MISSING else fmt(metric.logged)
    line = (
        f"FAIL {scenario} {metric.label}: logged={logged} expected={fmt(metric.expected)} "
        f"gap={fmt(metric.abs_err)} (rel {fmt(metric.rel_err)}, tol {fmt(metric.tol)}{tol_from(metric)})"
    )
    if metric.status is MetricStatus.FAIL and metric.wording is Wording.FIT:
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
        return diagnosis_line(metric.diagnosis)
    return f"= ? {metric.diagnosis_reason}" if metric.diagnosis_reason else ""


def diagnosis_line(diagnosis: Diagnosis) -> str:
    """`= <formula> (class 5 + 2): <value>, gap <gap>`: what a failure line is followed by. A diagnosis without a
    value (a formula that reproduces many numbers at once, its formula says how closely) is `= <formula> (class 41)`,
    or `= <formula>` when the catalogue has no number for it."""
    named = f"class {' + '.join(str(c) for c in diagnosis.classes)}" if diagnosis.classes else "not in the catalogue"
    if not math.isfinite(diagnosis.value):
        return f"= {diagnosis.formula}" + (f" ({named})" if diagnosis.classes else "")
    return f"= {diagnosis.formula} ({named}): {fmt(diagnosis.value)}, gap {fmt(diagnosis.gap)}"


def first_diagnosis(result: CheckResult) -> str:
    """The diagnosis a check's one line shows after its first failing metric: that metric's, else the first other
    failing metric's (`; <metric> = <formula> ...`), else the check's own first diagnosis; '' when none."""
    failing = [m for m in result.metrics if m.failed]
    if failing and failing[0].diagnosis is not None:
        return diagnosis_line(failing[0].diagnosis)
    other = next((m for m in failing if m.diagnosis is not None), None)
    if other is not None:
        return f"; {other.label} {diagnosis_line(other.diagnosis)}"
    return diagnosis_line(result.diagnoses[0]) if result.diagnoses else ""


def check_failure_lines(result: CheckResult, known: bool = False, stale: str = "") -> list[str]:
    """A check's failure lines, the same on every surface (pytest's failure message, the verbose terminal): for a
    failed or errored check, `<STATUS> <scenario> <id>: <problems and notes>` (when it has problems, or no failing
    metric), then each failing metric's pasteable line with its diagnosis indented under it, then the check's own
    diagnoses (indented), then the lines of the contract changes that touch it; [] for any other check.

    With a baseline: `known` (a failure the baseline lists) starts the check's and its metrics' lines with
    `known `; `stale` (for a passed check the baseline lists: what to do about it) makes the one line
    `STALE <scenario> <id>: <stale>`.
    """
    if stale:
        return [f"STALE {result.scenario} {result.id}: {stale}"]
    if result.status not in FAILED:
        return []
    mark = "known " if known else ""
    failing = [m for m in result.metrics if m.failed]
    lines = []
    if result.problems or not failing:
        lines.append(f"{mark}{result.status.value.upper()} {result.scenario} {result.id}: {result.message}")
    for m in failing:
        lines.append(mark + failure_line(result.scenario, m))
        if diagnosis_text(m):
            lines.append("    " + diagnosis_text(m))
    lines += ["    " + diagnosis_line(d) for d in result.diagnoses]
    return lines + list(result.contract_changes)


class CheckFailed(AssertionError):
    """A test's failure that is a check's own: its message is the check's failure lines, and it carries the result,
    so that a baseline judges the test by the result (`Report.known`), never by its message (harness/plugin.py)."""

    def __init__(self, result: CheckResult) -> None:
        self.result = result
        super().__init__("\n".join(check_failure_lines(result)))


def assert_passed(result: CheckResult) -> CheckResult:
    """`result` when its check passed; else CheckFailed with its failure lines (the way a test of one's own fails
    with a check: `assert_passed(ppo_report.add(case(...).run(ppo_cache, ppo_run_spec)))`)."""
    if not result.passed:
        raise CheckFailed(result)
    return result
