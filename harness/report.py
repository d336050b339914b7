"""Reports of a verify run: JSON for machines, Markdown for a pull request, a terminal table.

Schema of `verify.json`::

    {"target", "device", "dtype", "torch", "status", "seed",
     "checks": [{"id", "scenario", "status", "message",
                 "metrics": [{"name", "logged", "expected", "abs_err", "rel_err", "tol",
                              "status", "reason", "failed"}]}]}

`tol` is the allowed gap around `expected` (abs_tol + rel_tol * |expected|). `failed` is
false for a pass and for a not-recomputable metric the check opted out of (e.g. no
scores supplied), true otherwise, so readers need not re-derive it. NaN, inf
and None are written as null. A check's status is "pass", "fail", "error" or "skip";
the run's status is "fail" if any check failed, else "error" if any errored or none
passed (nothing was verified), else "pass". Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRIC_KEYS = ("name", "logged", "expected", "abs_err", "rel_err", "tol", "status", "reason")
CHECK_STATUSES = ("pass", "fail", "error", "skip")
JSON_NAME = "verify.json"
MARKDOWN_NAME = "verify.md"


def metric_failed(metric: Any) -> bool:
    """Not a pass, unless it is a not-recomputable metric the caller opted out of.

    Reads `failed` from an oracle.MetricResult or a metric dict; without it, any status
    other than "pass" fails.
    """
    failed = metric.get("failed") if isinstance(metric, Mapping) else getattr(metric, "failed", None)
    if isinstance(failed, bool):
        return failed
    status = metric.get("status") if isinstance(metric, Mapping) else getattr(metric, "status", None)
    return status != "pass"


def metric_dict(metric: Any) -> dict[str, Any]:
    """A metric result (oracle.MetricResult or a mapping) as a dict of METRIC_KEYS plus `failed`."""
    if isinstance(metric, Mapping):
        out = {key: metric.get(key) for key in METRIC_KEYS}
    else:
        out = {key: getattr(metric, key, None) for key in METRIC_KEYS}
    out["failed"] = metric_failed(metric)
    return out


@dataclass
class CheckRecord:
    """A check as the report keeps it: plain data (scenarios.CheckResult is the live verdict)."""

    id: str
    scenario: str
    status: str
    message: str = ""
    metrics: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """This check as plain data."""
        return {
            "id": self.id,
            "scenario": self.scenario,
            "status": self.status,
            "message": self.message,
            "metrics": [dict(m) for m in self.metrics],
        }


def _torch_version() -> str | None:
    """torch's installed version, read from package metadata (torch is not imported)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def overall_status(statuses: Iterable[str]) -> str:
    """'fail' if any check failed, else 'error' if any errored or none passed, else 'pass'."""
    statuses = set(statuses)
    if "fail" in statuses:
        return "fail"
    if "error" in statuses or "pass" not in statuses:
        return "error"
    return "pass"


class ReportCollector:
    """Collects check results during a run and writes the reports at the end.

    `config_errors` (one line each) become checks with status "error".
    """

    def __init__(
        self,
        target: str,
        device: str,
        torch_version: str | None = None,
        seed: int | None = None,
        dtype: str | None = None,
    ) -> None:
        self.target = target
        self.device = device
        self.torch = torch_version if torch_version is not None else _torch_version()
        self.seed = seed
        self.dtype = dtype
        self.checks: list[CheckRecord] = []
        self.config_errors: list[str] = []

    def add(
        self,
        check: str | Any,
        scenario: str | None = None,
        metrics: Iterable[Any] = (),
        message: str = "",
        status: str | None = None,
    ) -> CheckRecord:
        """Record one check, given by id (with scenario, metrics, ...) or as an object with
        `id`, `scenario`, `status`, `message` and `metrics`. Without a status it is 'fail'
        if any metric failed, else 'pass'."""
        if not isinstance(check, str):
            obj = check
            check, scenario, metrics = obj.id, obj.scenario, obj.metrics
            message, status = message or obj.message, status or obj.status
        metrics = list(metrics)
        if status is None:
            status = "fail" if any(metric_failed(m) for m in metrics) else "pass"
        if status not in CHECK_STATUSES:
            raise ValueError(f"check status must be one of {CHECK_STATUSES}, got {status!r}")
        if not message and status == "fail":
            message = "; ".join(failure_line(str(scenario), m) for m in metrics if metric_failed(m))
        result = CheckRecord(check, str(scenario), status, message, [metric_dict(m) for m in metrics])
        self.checks.append(result)
        return result

    def _all_checks(self) -> list[CheckRecord]:
        """The added checks, then one 'error' check per configuration error."""
        errors = [CheckRecord(f"config_error[{i}]", "configuration", "error", line)
                  for i, line in enumerate(self.config_errors)]  # fmt: skip
        return self.checks + errors

    @property
    def status(self) -> str:
        """The run's status (see overall_status)."""
        return overall_status(c.status for c in self._all_checks())

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (see the module docstring for the schema)."""
        return {
            "target": self.target,
            "device": self.device,
            "dtype": self.dtype,
            "torch": self.torch,
            "status": self.status,
            "seed": self.seed,
            "checks": [c.as_dict() for c in self._all_checks()],
        }

    def markdown(self) -> str:
        """The Markdown summary of the report so far."""
        return render_markdown(self.as_dict())

    def terminal_lines(self) -> list[str]:
        """The terminal table and failure lines of the report so far."""
        return render_terminal(self.as_dict()).splitlines()

    def write(self, directory: str | os.PathLike[str] = "reports", step_summary: bool = True) -> Path:
        """Write verify.json and verify.md under `directory`; append the Markdown to
        $GITHUB_STEP_SUMMARY when it is set and `step_summary`; return the JSON path."""
        report = self.as_dict()
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        json_path = out / JSON_NAME
        json_path.write_text(to_json(report) + "\n", encoding="utf-8")
        markdown = render_markdown(report)
        (out / MARKDOWN_NAME).write_text(markdown, encoding="utf-8")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and step_summary:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(markdown + "\n")
        return json_path


def _jsonable(value: Any) -> Any:
    """Replace NaN / inf floats by None, tuples by lists, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    try:
        return _jsonable(float(value))
    except (TypeError, ValueError):
        return str(value)


def to_json(report: Mapping[str, Any]) -> str:
    """The report as strict JSON (NaN and None become null)."""
    return json.dumps(_jsonable(report), indent=2, allow_nan=False)


def fmt(value: Any) -> str:
    """A number for humans: 6 significant digits; 'n/a' for None."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.6g}"


def failure_line(scenario: str, metric: Any) -> str:
    """`FAIL <scenario> <metric>: logged=<v> expected=<v> gap=<abs> (rel <r>, tol <t>)`.

    Statuses other than a plain 'fail' (missing, nan, not_recomputable) add `[status: reason]`.
    """
    m = metric_dict(metric)
    logged = "missing" if m["status"] == "missing" else fmt(m["logged"])
    line = (
        f"FAIL {scenario} {m['name']}: logged={logged} expected={fmt(m['expected'])} "
        f"gap={fmt(m['abs_err'])} (rel {fmt(m['rel_err'])}, tol {fmt(m['tol'])})"
    )
    if m["status"] != "fail":
        line += f" [{m['status']}: {m['reason'] or 'no reason given'}]"
    return line


def failure_lines(report: Mapping[str, Any]) -> list[str]:
    """One failure line per failing metric, and one per failed or errored check without metrics."""
    lines = []
    for check in report["checks"]:
        failing = [m for m in check["metrics"] if metric_failed(m)]
        if check["status"] in ("fail", "error"):
            lines += [failure_line(check["scenario"], m) for m in failing]
            if not failing:
                lines.append(f"{check['status'].upper()} {check['scenario']} {check['id']}: {check['message']}")
    return lines


# ---------------------------------------------------------------------------- tables


def _md_cell(value: Any) -> str:
    """A Markdown table cell: numbers formatted, pipes escaped, one line."""
    text = fmt(value) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Lines of a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in rows]
    return lines


_METRIC_HEADER = ["check", "metric", "logged", "expected", "gap", "rel", "tol", "status", "reason"]


def _metric_rows(report: Mapping[str, Any], only_failing: bool) -> list[list[Any]]:
    """One row per metric of every check (only the failing ones when asked)."""
    rows = []
    for check in report["checks"]:
        for m in check["metrics"]:
            if only_failing and not metric_failed(m):
                continue
            rows.append([check["id"], m["name"], m["logged"], m["expected"], m["abs_err"],
                         m["rel_err"], m["tol"], m["status"], m["reason"] or ""])  # fmt: skip
    return rows


def render_markdown(report: Mapping[str, Any]) -> str:
    """A short Markdown summary: header, one row per check, the failing metrics, all metrics folded."""
    lines = [
        f"## PPO statistics verify: {str(report['status']).upper()}",
        "",
        f"target `{report['target']}` · device `{report['device']}` · dtype `{report.get('dtype')}` "
        f"· torch `{report['torch']}` · seed `{report['seed']}`",
        "",
    ]
    checks = [[c["id"], c["scenario"], c["status"], c["message"]] for c in report["checks"]]
    lines += _md_table(["check", "scenario", "status", "message"], checks)
    failing = _metric_rows(report, only_failing=True)
    if failing:
        lines += ["", "### Failing metrics", ""] + _md_table(_METRIC_HEADER, failing)
    every = _metric_rows(report, only_failing=False)
    if every:
        lines += ["", "<details><summary>All metrics</summary>", ""]
        lines += _md_table(_METRIC_HEADER, every) + ["", "</details>"]
    return "\n".join(lines) + "\n"


def render_terminal(report: Mapping[str, Any]) -> str:
    """A fixed-width table of every metric, then the one-line failures."""
    header = _METRIC_HEADER[:-1]
    rows = [[fmt(cell) if not isinstance(cell, str) else cell for cell in row[:-1]]
            for row in _metric_rows(report, only_failing=False)]  # fmt: skip
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [
        f"PPO statistics verify: {str(report['status']).upper()}  target={report['target']} "
        f"device={report['device']} dtype={report.get('dtype')} torch={report['torch']} seed={report['seed']}"
    ]
    for row in [header, *rows]:
        lines.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
    lines += failure_lines(report)
    return "\n".join(lines)
