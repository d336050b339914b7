"""The gate run in a scratch copy: `python -m harness verify` (or `verify-dist`) there, and the checks it reported.

The copy's folder is first on PYTHONPATH (project.scratch_env), so its `reference_trainers`,
patched or not, is the one the gate imports.

A run is a fresh `python -m harness` process, or, given a GateServer (Linux, gate_client.py), a child
forked from one process that has imported torch, transformers, accelerate and the harness
once (gate_server.py), but no trainer: the child imports the scratch copy's
`reference_trainers` itself, exactly as the fresh process would, and saves each run the
seconds of those imports. A `verify-dist` run forked so forks its ranks from itself in turn
(harness/dist.py, `--launch fork`): they share the child's process group, which the server
kills at the run's timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .gate_client import TRAINER_PACKAGES, GateServer
from .project import scratch_env


@dataclass
class RunOutcome:
    """One `python -m harness ...` run in a scratch copy."""

    returncode: int | None
    checks: list[dict]
    seconds: float
    log: str
    problem: str = ""
    imported: dict[str, str | None] = field(default_factory=dict)
    """A forked run's modules of RECORDED and their files (empty for a fresh process)."""

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


def trainer_modules(root: Path) -> tuple[str, ...]:
    """Every module of the trainer packages in the copy under `root`, by name."""
    return tuple(
        f"{package}.{path.stem}" if path.stem != "__init__" else package
        for package in TRAINER_PACKAGES
        for path in sorted((root / package).glob("*.py"))
    )


def imported_elsewhere(imported: dict[str, str | None], scratch: Path) -> list[str]:
    """Each trainer module of a forked run that was not imported from the scratch copy, with its file."""
    root = scratch.resolve()
    return [
        f"{name} from {path}"
        for name, path in sorted(imported.items())
        if name.partition(".")[0] in TRAINER_PACKAGES
        and path is not None
        and not Path(path).resolve().is_relative_to(root)
    ]


def run_harness(
    scratch: Path,
    command: str = "verify",
    selection: list[str] | tuple[str, ...] = (),
    timeout: float = 900.0,
    target: str = "reference",
    server: GateServer | None = None,
) -> RunOutcome:
    """Run the gate in `scratch` and collect its checks (forked from `server` when given one)."""
    report_dir = scratch / "_report"
    shutil.rmtree(report_dir, ignore_errors=True)
    report_dir.mkdir()
    log_path = scratch / "_run.log"
    args = harness_command(command, report_dir, selection, target)
    imported: dict[str, str | None] = {}
    start = time.perf_counter()
    if server is not None:
        imports = scratch / "_imports.json"
        # verify-dist's ranks import the trainer, in children of the forked run that _imports.json cannot list:
        # the run imports the copy's trainer modules first, which the ranks then inherit, and lists them
        preimport = trainer_modules(scratch) if command == "verify-dist" else ()
        code, problem = server.run(scratch, args[3:], log_path, timeout, imports, preimport=preimport)
        if imports.is_file():
            imported = json.loads(imports.read_text(encoding="utf-8"))
        elsewhere = imported_elsewhere(imported, scratch)
        if elsewhere and not problem:
            problem = f"the trainer was not imported from the scratch copy: {'; '.join(elsewhere)}"
    else:
        code, problem = run_process(scratch, args, log_path, timeout)
    seconds = time.perf_counter() - start
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
    checks, unreadable = read_checks(report_dir)
    if code is not None and unreadable and code in (0, 1) and not problem:
        problem = unreadable
    return RunOutcome(code, checks, seconds, text, problem, imported)


def run_process(scratch: Path, args: list[str], log_path: Path, timeout: float) -> tuple[int | None, str]:
    """`args` as a fresh process in `scratch` (its output into `log_path`): (exit code or None, a problem or "")."""
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(
                args,
                cwd=scratch,
                env=scratch_env(scratch),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
            return proc.returncode, ""
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s"
