"""verify.md: a short summary for a pull request: header, one row per check, the failing metrics, all folded."""

from __future__ import annotations

from typing import Any

from harness.report.format import diagnosis_text, fmt

from .model import Report
from .rows import METRIC_HEADER, metric_rows


def md_cell(value: Any) -> str:
    """A Markdown table cell: numbers formatted, pipes escaped, one line."""
    text = fmt(value) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Lines of a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(md_cell(cell) for cell in row) + " |" for row in rows]


def render_markdown(report: Report) -> str:
    """The Markdown summary of `report`."""
    lines = [
        f"## {(report.algorithm or 'ppo').upper()} statistics verify: {report.status.value.upper()}",
        "",
        f"target `{report.target}` · algorithm `{report.algorithm}` · device `{report.device}` · "
        f"dtype `{report.dtype}` · torch `{report.torch}` · seed `{report.seed}`",
        "",
    ]
    checks = [[str(c.id), c.scenario, c.status.value, c.message] for c in report.all_checks()]
    lines += md_table(["check", "scenario", "status", "message"], checks)
    failing = metric_rows(report, only_failing=True)
    if failing:
        lines += ["", "### Failing metrics", ""] + md_table(METRIC_HEADER, failing)
        diagnosed = [
            f"- `{c.id}` {m.label} {diagnosis_text(m)}"
            for c in report.all_checks()
            for m in c.metrics
            if m.failed and diagnosis_text(m)
        ]
        if diagnosed:
            lines += ["", "### Why: the known pooling that reproduces each logged value", "", *diagnosed]
    every = metric_rows(report, only_failing=False)
    if every:
        lines += ["", "<details><summary>All metrics</summary>", ""]
        lines += md_table(METRIC_HEADER, every) + ["", "</details>"]
    return "\n".join(lines) + "\n"
