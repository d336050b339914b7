"""verify.md: a short summary for a pull request: header, one row per check, the failing metrics, all folded.

With a baseline the header gives the run's verdict with it applied and counts the known
failures; a known failure's status reads `known fail` and its message ends with the entry's
reason (and link); a listed check that fails otherwise than its entry pins reads `fail (not as
known)`, its message what changed; a stale entry's reads `stale` (remove it from the baseline:
a fix, or a change in how the trainer runs the scenario); the metrics of
known failures are listed apart from the failing metrics, under "Known failing metrics". A check the target declares
it cannot run reads `not_applicable`, its message the declared reason, and the header counts them.
"""

from __future__ import annotations

from typing import Any

from harness.report.format import diagnosis_text, fmt
from harness.verdict import CheckResult

from .model import Report
from .rows import METRIC_HEADER, metric_rows
from .terminal import counts


def md_cell(value: Any) -> str:
    """A Markdown table cell: numbers formatted, pipes escaped, one line."""
    text = fmt(value) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Lines of a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(md_cell(cell) for cell in row) + " |" for row in rows]


def status_and_message(report: Report, check: CheckResult) -> list[str]:
    """A check's status and message cells, with what the baseline made of it."""
    entry = report.baseline.entry(str(check.id)) if report.baseline is not None else None
    changes = report.baseline_changes(check)
    if entry is not None and changes:
        return [f"{check.status.value} (not as known)", f"not as the baseline knows it: {'; '.join(changes)}"]
    if entry is None or not (report.known(check) or report.stale(check)):
        return [check.status.value, check.message]
    said = f"baseline: {entry.reason}" + (f" ({entry.link})" if entry.link else "")
    if report.stale(check):
        return ["stale", f"passes: remove it from the baseline `{report.baseline.path}` once you know why: a fix, or "
                         f"a change in how the trainer runs the scenario ({said})"]  # fmt: skip
    return ["known fail", f"{check.message} ({said})"]


def render_markdown(report: Report) -> str:
    """The Markdown summary of `report`."""
    lines = [
        f"## {(report.algorithm or 'ppo').upper()} statistics verify: {report.verdict.value.upper()}" + counts(report),
        "",
        f"target `{report.target}` · algorithm `{report.algorithm}` · device `{report.device}` · "
        f"dtype `{report.dtype}` · torch `{report.torch}` · seed `{report.seed}`"
        + (f" · baseline `{report.baseline.path}`" if report.baseline is not None else ""),
        "",
    ]
    checks = [[str(c.id), c.scenario, *status_and_message(report, c)] for c in report.all_checks()]
    lines += md_table(["check", "scenario", "status", "message"], checks)
    known = {str(c.id) for c in report.all_checks() if report.known(c)}
    failing = metric_rows(report, only_failing=True)
    new = [row for row in failing if row[0] not in known]
    if new:
        lines += ["", "### Failing metrics", ""] + md_table(METRIC_HEADER, new)
    if len(new) < len(failing):
        lines += ["", "### Known failing metrics (baseline)", ""]
        lines += md_table(METRIC_HEADER, [row for row in failing if row[0] in known])
    if failing:
        diagnosed = [
            f"- `{c.id}` {m.label} {diagnosis_text(m)}"
            for c in report.all_checks()
            for m in c.metrics
            if m.failed and diagnosis_text(m)
        ]
        if diagnosed:
            lines += ["", "### Why: the known pooling or formula that reproduces each logged value", "", *diagnosed]
    every = metric_rows(report, only_failing=False)
    if every:
        lines += ["", "<details><summary>All metrics</summary>", ""]
        lines += md_table(METRIC_HEADER, every) + ["", "</details>"]
    return "\n".join(lines) + "\n"
