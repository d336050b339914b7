"""The gate run in a scratch copy: `python -m harness verify` (or `verify-dist`) there, and the checks it reported.

The copy's folder is first on PYTHONPATH (project.scratch_env), so its `reference_trainers`,
patched or not, is the one the gate imports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .project import scratch_env


@dataclass
class RunOutcome:
    """One `python -m harness ...` run in a scratch copy."""

    returncode: int | None
    checks: list[dict]
    seconds: float
    log: str
    problem: str = ""

    @property
    def failed(self) -> list[str]:
        """The ids of the checks that failed, named by the mutant or not."""
        return [c["id"] for c in self.checks if c.get("status") == "fail"]


def harness_command(
    command: str, report_dir: Path, selection: list[str] | tuple[str, ...] = (), target: str = "reference"
) -> list[str]:
    """The gate's command line in a scratch copy: verify against a reference trainer, or verify-dist."""
    args = [sys.executable, "-m", "harness", command, "--target", target, "--report-dir", str(report_dir)]
    if command == "verify":
        args += [f"--check={check}" for check in selection]
    return args


def read_checks(report_dir: Path) -> tuple[list[dict], str]:
    """Checks of every JSON report under `report_dir` (verify.json; verify-dist writes dist/verify.json)."""
    files = sorted(report_dir.rglob("*.json"))
    if not files:
        return [], f"no JSON report in {report_dir}"
    checks: list[dict] = []
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            return [], f"{path.name} is unreadable: {exc}"
        found = data.get("checks") if isinstance(data, dict) else None
        if not isinstance(found, list):
            return [], f"{path.name} has no list of checks"
        checks += [c for c in found if isinstance(c, dict) and "id" in c and "status" in c]
    return checks, ""


def run_harness(
    scratch: Path,
    command: str = "verify",
    selection: list[str] | tuple[str, ...] = (),
    timeout: float = 900.0,
    target: str = "reference",
) -> RunOutcome:
    """Run the gate in `scratch` and collect its checks."""
    report_dir = scratch / "_report"
    shutil.rmtree(report_dir, ignore_errors=True)
    report_dir.mkdir()
    log_path = scratch / "_run.log"
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(
                harness_command(command, report_dir, selection, target),
                cwd=scratch,
                env=scratch_env(scratch),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
            code: int | None = proc.returncode
            problem = ""
        except subprocess.TimeoutExpired:
            code, problem = None, f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    text = log_path.read_text(encoding="utf-8", errors="replace")
    checks, unreadable = read_checks(report_dir)
    if code is not None and unreadable and code in (0, 1):
        problem = unreadable
    return RunOutcome(code, checks, seconds, text, problem)


def log_tail(text: str, lines: int = 25) -> str:
    """The end of a run's log, enough to say why it erred without the whole of it."""
    return "\n".join(text.rstrip().splitlines()[-lines:])
