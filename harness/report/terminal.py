"""The terminal verdict: a fixed-width table of every metric, then one pasteable line per failure."""

from __future__ import annotations

from harness.verdict import CheckStatus, failure_line, fmt

from .model import Report
from .rows import METRIC_HEADER, metric_rows


def failure_lines(report: Report) -> list[str]:
    """One line per failing metric, and one per failed or errored check without a failing metric."""
    lines = []
    for check in report.all_checks():
        if check.status not in (CheckStatus.FAIL, CheckStatus.ERROR):
            continue
        failing = [m for m in check.metrics if m.failed]
        lines += [failure_line(check.scenario, m) for m in failing]
        if not failing:
            lines.append(f"{check.status.value.upper()} {check.scenario} {check.id}: {check.message}")
    return lines


def render_terminal(report: Report) -> str:
    """The table and the failure lines."""
    header = METRIC_HEADER[:-1]
    rows = [[cell if isinstance(cell, str) else fmt(cell) for cell in row[:-1]] for row in metric_rows(report, False)]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [
        f"PPO statistics verify: {report.status.value.upper()}  target={report.target} algorithm={report.algorithm} "
        f"device={report.device} dtype={report.dtype} torch={report.torch} seed={report.seed}"
    ]
    for row in [header, *rows]:
        lines.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
    return "\n".join(lines + failure_lines(report))
