"""What the curated runner shows and keeps: the terminal table and summary, and reports/curated.json.

Apart from runner.py so that running a mutant and telling about it change for their own reasons.
"""

from __future__ import annotations

import json
from pathlib import Path

from .model import ControlResult, CuratedResult, CuratedRun, CuratedStatus


def table(results: list[CuratedResult]) -> str:
    """A plain-text table for the terminal: each mutant, its status and the named checks that killed it."""
    rows = [("mutant", "class", "diagnosed", "status", "killed by (failed named checks)", "s")]
    for r in results:
        diagnosed = r.diagnosed
        rows.append(
            (r.id, str(r.mutant.bug_class), diagnosed, r.status.text, ", ".join(r.named_failed) or "-",
             f"{r.seconds:.1f}")
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_summary(results: list[CuratedResult], controls: dict[str, ControlResult], jobs: int, wall: float) -> None:
    """The terminal report: the table, the controls, and why each mutant that was not killed was not."""
    print(table(results))
    for command, c in controls.items():
        what = "full suite" if command == "verify" else command
        print(f"\ncontrol ({what}, unmodified copy): {'pass' if c.passed else 'FAIL'} in {c.seconds:.1f} s")
    print(f"curated run: {len(results)} mutant(s), {jobs} job(s), {wall:.1f} s wall")
    own = sum(1 for r in results if r.own_class_named)
    wrong = [f"{r.id} diagnosed as class {r.diagnosed}" for r in results if r.misdiagnosed]
    print(f"diagnosed as their own class: {own} of {len(results)}; misdiagnosed: {', '.join(wrong) or 'none'}")
    for r in results:
        if not r.passed or r.status is CuratedStatus.NOT_RUN:
            print(f"\n{r.id} [{r.status.text}]: {r.reason}")
    for command, c in controls.items():
        if not c.passed:
            print(
                f"\n`{command}` does not pass on the unmodified trainer, so no kill by it means anything:\n{c.reason}"
            )


def write_curated_json(report_dir: Path, run: CuratedRun) -> None:
    """Write reports/curated.json: the controls, the settings and every mutant's result, for the report to read."""
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "curated.json").write_text(json.dumps(run.to_dict(), indent=2) + "\n", encoding="utf-8")
