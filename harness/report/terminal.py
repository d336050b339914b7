"""The terminal verdict: one line per check (status, check id, what failed first); `verbose` adds every metric.

A failed check's line ends with its first failing metric as a pasteable failure line
(`FAIL <scenario> <metric>: logged=... expected=... gap=... (rel ..., tol ...)`), or, when no
metric failed, its first problem; `(+N more)` counts what else failed in it. When the check has a
diagnosis (a known wrong pooling or formula that reproduces a logged number, harness/diagnose.py;
or a known bug the check itself found, `CheckResult.diagnoses`), the line shows it after what failed
first: `= <formula> (class N) ...`, or `; <metric> = <formula> ...` when it is another failing
metric's. The verbose form is the metric table, then every check's failure lines
(harness/report/format.py, `check_failure_lines`: the lines pytest's failure message has).

With a baseline, a known failure's line starts with `known` and ends with its entry's reason
(`known FAIL  <id>  <what failed first> (baseline: <reason>)`); a listed check that fails otherwise
than its entry pins reads `FAIL  <id>  not as the baseline knows it: <metric>: class 16 -> no
diagnosis; ... (baseline: <reason>)` (`Report.baseline_changes`); a passed check the baseline lists
reads `STALE <id>  passes: remove it from the baseline <file> once you know why: a fix, or a change in
how the trainer runs the scenario (baseline: <reason>)`. The headline gives the run's verdict with the
baseline applied and counts them, and the line after it names the entries in the check-level form
(they pin no metric: `--write-baseline` rewrites them).

A check the target declares it cannot run reads `n/a   <id>  not applicable: <reason>`, and the headline counts
them: `PASS (3 not applicable)`.
"""

from __future__ import annotations

from harness.baseline import CHANGED, KNOWN, STALE, Entry
from harness.report.format import FAILED, check_failure_lines, failure_line, first_diagnosis, fmt
from harness.verdict import CheckResult, CheckStatus

from .model import Report
from .rows import METRIC_HEADER, metric_rows


def failure_lines(report: Report) -> list[str]:
    """Every check's failure lines (`check_failure_lines`), with what the baseline made of it, in report order: a
    listed check that fails otherwise than pinned adds, indented, how."""
    lines = []
    for check in report.all_checks():
        stale = stale_text(report, check) if report.stale(check) else ""
        lines += check_failure_lines(check, known=report.known(check), stale=stale)
        if report.baseline_outcome(check) == CHANGED:
            lines.append(f"    {check.id} {changed_text(report, check)}")
    return lines


def entry_of(report: Report, check: CheckResult) -> Entry:
    """The baseline entry of a check the baseline lists (a known failure or a stale entry)."""
    entry = report.baseline.entry(str(check.id)) if report.baseline is not None else None
    if entry is None:
        raise KeyError(f"the baseline does not list {check.id}")
    return entry


def stale_text(report: Report, check: CheckResult) -> str:
    """What a stale entry's line says after the check id: the check passes, which is a fix or a change in how the
    trainer runs its scenario, and the run fails until the entry is removed."""
    return (
        f"passes: remove it from the baseline {report.baseline.path} once you know why: a fix, or a change in how "
        f"the trainer runs the scenario (baseline: {entry_of(report, check).reason})"
    )


def changed_text(report: Report, check: CheckResult) -> str:
    """What the line of a listed check that fails otherwise than its entry pins says after the check id."""
    said = "; ".join(report.baseline_changes(check))
    return f"not as the baseline knows it: {said} (baseline: {entry_of(report, check).reason})"


def unpinned_line(report: Report) -> list[str]:
    """The line naming the baseline's entries in the check-level form, or none."""
    unpinned = report.baseline.unpinned() if report.baseline is not None else []
    if not unpinned:
        return []
    count = f"{len(unpinned)} entr{'ies' if len(unpinned) != 1 else 'y'}"
    return [
        f"baseline {report.baseline.path}: {count} pin no metrics (the check-level form, which holds any failure of "
        f"its check, a raise included): rewrite the file with --write-baseline ({', '.join(unpinned[:3])}"
        + (", ...)" if len(unpinned) > 3 else ")")
    ]


def first_failure(check: CheckResult) -> str:
    """What failed first in `check`, on one line: its first failing metric, else its first problem; followed by
    the check's diagnosis when it has one (`first_diagnosis`)."""
    failing = [m for m in check.metrics if m.failed]
    if failing:
        first, more = failure_line(check.scenario, failing[0]), len(failing) - 1
    else:
        problems = check.problems or check.notes or ("no reason given",)
        first = f"{check.status.value.upper()} {check.scenario}: {problems[0].splitlines()[0]}"
        more = len(check.problems) - 1
    diagnosis = first_diagnosis(check)
    if diagnosis and diagnosis.removeprefix("= ") not in first:
        first += diagnosis if diagnosis.startswith(";") else f" {diagnosis}"
    return first + (f" (+{more} more)" if more > 0 else "")


def check_lines(report: Report) -> list[str]:
    """One line per check: `pass  <id>`, or `FAIL  <id>  <what failed first>` (ERROR, skip alike); a known
    failure's and a stale entry's as the module docstring says."""
    checks = report.all_checks()
    width = max((len(str(c.id)) for c in checks), default=0)
    lines = []
    for check in checks:
        status = check.status.value.upper() if check.status in FAILED else check.status.value
        if report.known(check):
            reason = entry_of(report, check).reason
            lines.append(f"known {status:<5} {str(check.id):<{width}}  {first_failure(check)} (baseline: {reason})")
        elif report.stale(check):
            lines.append(f"{'STALE':<5} {str(check.id):<{width}}  {stale_text(report, check)}")
        elif report.baseline_outcome(check) == CHANGED:
            lines.append(f"{status:<5} {str(check.id):<{width}}  {changed_text(report, check)}")
        elif check.status in FAILED:
            lines.append(f"{status:<5} {str(check.id):<{width}}  {first_failure(check)}")
        elif check.status is CheckStatus.NOT_APPLICABLE:
            lines.append(f"{'n/a':<5} {str(check.id):<{width}}  not applicable: {check.message}")
        else:
            lines.append(f"{status:<5} {check.id}")
    return lines


def counts(report: Report) -> str:
    """` (13 known failures, 1 stale baseline entry, 1 not as known, 3 not applicable)`: the known failures, stale
    entries and listed checks that fail otherwise than pinned when the run has a baseline, the checks that are not
    applicable when there are any; '' for none of them."""
    said = []
    if report.baseline is not None:
        known, stale = len(report.with_baseline(KNOWN)), len(report.with_baseline(STALE))
        said.append(f"{known} known failure{'s' if known != 1 else ''}")
        if stale:
            said.append(f"{stale} stale baseline entr{'ies' if stale != 1 else 'y'}")
        changed = len(report.with_baseline(CHANGED))
        if changed:
            said.append(f"{changed} not as known")
    not_applicable = sum(c.status is CheckStatus.NOT_APPLICABLE for c in report.checks)
    if not_applicable:
        said.append(f"{not_applicable} not applicable")
    return f" ({', '.join(said)})" if said else ""


def headline(report: Report) -> str:
    """The verdict's first line: the run's status and settings."""
    return (
        f"{(report.algorithm or 'ppo').upper()} statistics verify: {report.verdict.value.upper()}"
        f"{counts(report)}  "
        f"target={report.target} algorithm={report.algorithm} "
        f"device={report.device} dtype={report.dtype} torch={report.torch} seed={report.seed}"
    )


def render_terminal(report: Report, verbose: bool = False) -> str:
    """One line per check; with `verbose`, the metric table and every failure line instead."""
    if not verbose:
        return "\n".join([headline(report), *unpinned_line(report), *check_lines(report)])
    header = METRIC_HEADER[:-1]
    rows = [[cell if isinstance(cell, str) else fmt(cell) for cell in row[:-1]] for row in metric_rows(report, False)]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [headline(report), *unpinned_line(report)]
    for row in [header, *rows]:
        lines.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
    return "\n".join(lines + failure_lines(report))
