"""A baseline file written from a run: one `[[known]]` entry per failed check (`--write-baseline FILE`).

harness/baseline.py reads and validates such a file; this module writes one from a `Report`, each new
entry's reason the check's one line on the terminal (`first_failure`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.baseline import Entry
from harness.verdict import CheckStatus

from .model import Report
from .terminal import first_failure

HEADER = """\
# Known failures of the gate on target {target} ({algorithm}): with `--baseline FILE` they are reported
# as known; a new failure still fails the run, and so does a check listed here that passes (remove it).
"""


def toml_string(text: str) -> str:
    """`text` as a TOML basic string (JSON's escapes are TOML's, but for DEL, which TOML wants escaped)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def failed_entries(report: Report) -> list[Entry]:
    """One entry per failed check of `report`, in report order: its baseline entry when it has one (a known
    failure keeps its reason and link), else one whose reason is the check's first failure line (without its
    leading `FAIL <scenario>`)."""
    entries = []
    for check in report.checks:
        if check.status is not CheckStatus.FAIL:
            continue
        listed = report.baseline.entry(str(check.id)) if report.baseline is not None else None
        line = first_failure(check)
        reason = line.removeprefix(f"FAIL {check.scenario}").lstrip(": ") or line
        entries.append(listed or Entry(str(check.id), reason))
    return entries


def render(entries: list[Entry], target: str, algorithm: str | None) -> str:
    """The text of a baseline file listing `entries`."""
    lines = [HEADER.format(target=target, algorithm=algorithm)]
    for entry in entries:
        lines += ["[[known]]", f"check = {toml_string(entry.check)}", f"reason = {toml_string(entry.reason)}"]
        if entry.link:
            lines.append(f"link = {toml_string(entry.link)}")
        lines.append("")
    return "\n".join(lines)


def write(path: str | os.PathLike[str], report: Report) -> int:
    """Write `report`'s failed checks to `path` as a baseline file; return how many it lists."""
    entries = failed_entries(report)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(entries, report.target, report.algorithm), encoding="utf-8")
    return len(entries)
