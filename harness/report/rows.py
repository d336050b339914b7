"""The metric table both the Markdown and the terminal renderers print."""

from __future__ import annotations

from typing import Any

from .model import Report

METRIC_HEADER = ["check", "metric", "logged", "expected", "gap", "rel", "tol", "status", "reason"]


def metric_rows(report: Report, only_failing: bool) -> list[list[Any]]:
    """One row per metric of every check (only the failing ones when asked)."""
    return [
        [str(check.id), m.label, m.logged, m.expected, m.abs_err, m.rel_err, m.tol, m.status.value, m.reason]
        for check in report.all_checks()
        for m in check.metrics
        if m.failed or not only_failing
    ]
