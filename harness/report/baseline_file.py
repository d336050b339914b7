"""A baseline file written from a run: one `[[known]]` entry per failed check (`--write-baseline FILE`), each
pinning how its check fails (harness/baseline_pins.py: each failing metric's diagnoses, the check's own, the raise).

harness/baseline.py reads and validates such a file; this module writes one from a `Report`, each new
entry's reason the check's one line on the terminal (`first_failure`), a listed check's the reason and link of
its entry (whatever its form: an entry in the check-level form comes out pinning its metrics).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from harness.baseline import Entry
from harness.baseline_pins import pins_of, render_pins, toml_string
from harness.verdict import CheckResult, CheckStatus

from .model import Report
from .terminal import first_failure

HEADER = """\
# Known failures of the gate on target {target} ({algorithm}): with `--baseline FILE` they are reported
# as known while each fails as pinned: a check that fails otherwise (a metric with another diagnosis or none, a
# metric not pinned, a raise not pinned) or passes (a fix, or a change in how the trainer runs it) fails the run.
# [known.metrics] pins each failing metric's diagnoses: class numbers (docs/bug-catalogue.md), "none" where no
# known pooling reproduces it; `name @ where` pins one of its comparisons.
"""


def failed_checks(report: Report) -> list[tuple[Entry, CheckResult]]:
    """One entry per failed check of `report`, in report order, with its result: pinning how it fails, with the
    reason and link of its baseline entry when it has one, else a reason that is the check's first failure line
    (without its leading `FAIL <scenario>`)."""
    entries = []
    for check in report.checks:
        if check.status is not CheckStatus.FAIL:
            continue
        listed = report.baseline.entry(str(check.id)) if report.baseline is not None else None
        line = first_failure(check)
        reason = line.removeprefix(f"FAIL {check.scenario}").lstrip(": ") or line
        entries.append((replace(listed or Entry(str(check.id), reason), pins=pins_of(check)), check))
    return entries


def failed_entries(report: Report) -> list[Entry]:
    """The entries of `failed_checks`."""
    return [entry for entry, _ in failed_checks(report)]


def render(entries: list[tuple[Entry, CheckResult | None]], target: str, algorithm: str | None) -> str:
    """The text of a baseline file listing `entries` (each with the result it was written from, which names in a
    comment the problems that are no metric's, or None)."""
    lines = [HEADER.format(target=target, algorithm=algorithm)]
    for entry, result in entries:
        lines += ["[[known]]", f"check = {toml_string(entry.check)}", f"reason = {toml_string(entry.reason)}"]
        if entry.link:
            lines.append(f"link = {toml_string(entry.link)}")
        if entry.pins is not None:
            lines += render_pins(entry.pins, result)
        lines.append("")
    return "\n".join(lines)


def write(path: str | os.PathLike[str], report: Report) -> int:
    """Write `report`'s failed checks to `path` as a baseline file; return how many it lists."""
    entries = failed_checks(report)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(entries, report.target, report.algorithm), encoding="utf-8")
    return len(entries)
