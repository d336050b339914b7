"""The controls of a curated run: the whole gate of an algorithm on the unmodified scratch copy.

A kill means something only if the same checks pass without the mutant; a control
also proves that the scratch copy, the gate and the import path work.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import catalogue
from .gate_client import GateServer, log_tail
from .harness_run import run_harness
from .model import ControlResult
from .project import ROOT, copy_project, scratch_env


def _controls() -> dict[str, tuple[str, str]]:
    """`verify` and `verify-dist` for the default algorithm, `verify-NAME` and `verify-dist-NAME` for the others."""
    from harness.algorithms import DEFAULT_ALGORITHM

    out = {}
    for algorithm in catalogue.TARGETS:
        suffix = "" if algorithm == DEFAULT_ALGORITHM else f"-{algorithm}"
        out.update({f"verify{suffix}": ("verify", algorithm), f"verify-dist{suffix}": ("verify-dist", algorithm)})
    return out


CONTROLS = _controls()
"""Control name (as curated.json keys it) -> (command, algorithm) run on the unmodified copy."""


def control_name(command: str, algorithm: str) -> str:
    """The control a mutant of `algorithm` run under `command` is judged beside."""
    return next(name for name, key in CONTROLS.items() if key == (command, algorithm))


def run_control(timeout: float, command: str = "verify", server: GateServer | None = None) -> ControlResult:
    """The unmodified copy under control `command` (a key of CONTROLS): the full verify suite (or the
    two-process run) of its algorithm, against that algorithm's reference target, must pass.

    A run in a fresh process is preceded by a probe process that imports the trainer and the harness
    and must find both in the scratch copy; a run forked from `server` lists what it imported itself,
    and must have imported the trainer from the scratch copy and the harness from the server's copy
    of the project (a verify-dist run imports the copy's trainer before it forks its ranks:
    harness_run.run_harness).
    """
    command, algorithm = CONTROLS[command]
    target = catalogue.TARGETS[algorithm]
    scratch = Path(tempfile.mkdtemp(prefix=f"ppo-mutant-control-{command}-{algorithm}-"))
    forked = server is not None
    try:
        copy_project(scratch)
        if not forked:
            why = probe_imports(scratch, timeout)
            if why:
                return ControlResult(False, 0.0, 0, why)
        outcome = run_harness(scratch, command, "", timeout, target, server if forked else None)
        if outcome.problem or outcome.returncode != 0:
            why = outcome.problem or f"exit code {outcome.returncode}, failed: {', '.join(outcome.failed) or 'none'}"
            return ControlResult(
                False, outcome.seconds, len(outcome.checks), f"{command}: {why}\n{log_tail(outcome.log)}"
            )
        if forked:
            assert server is not None
            why = forked_imports(outcome.imported, scratch, server.base)
            if why:
                return ControlResult(False, outcome.seconds, len(outcome.checks), why)
        ids = {c["id"] for c in outcome.checks}
        missing = sorted(set(catalogue.ALGORITHM_CHECKS[algorithm]) - ids) if command == "verify" else []
        if missing:
            return ControlResult(False, outcome.seconds, len(ids), f"the gate no longer reports check(s) {missing}")
        return ControlResult(True, outcome.seconds, len(ids))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def probe_imports(scratch: Path, timeout: float) -> str:
    """A fresh process with the environment of a run in `scratch` imports the trainer and the harness from
    there; why not ("" when it does)."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import reference_trainers.ppo as t, harness; print(t.__file__); print(harness.__file__)",
        ],
        cwd=tempfile.gettempdir(),
        env=scratch_env(scratch),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    paths = probe.stdout.split()
    if (
        probe.returncode != 0
        or len(paths) != 2
        or not all(Path(p).resolve().is_relative_to(scratch.resolve()) for p in paths)
    ):
        return f"the scratch copy is not what gets imported: {probe.stdout}{probe.stderr}"
    return ""


def forked_imports(imported: dict[str, str | None], scratch: Path, base: Path) -> str:
    """Why a forked control's imports are not the scratch copy's trainer and a copy's harness ("" when they are)."""

    def under(name: str, root: Path) -> bool:
        path = imported.get(name)
        return path is not None and Path(path).resolve().is_relative_to(root.resolve())

    if under("reference_trainers", scratch) and under("harness", base):
        return ""
    shown = {name: imported.get(name) for name in ("reference_trainers", "harness")}
    return f"the scratch copy is not what gets imported: {shown} (trainer from {scratch}, harness from {base})"


def has_command(command: str, root: Path = ROOT) -> bool:
    """Whether the checkout under `root` has `command` (verify-dist needs harness/dist.py, which may be absent)."""
    return command == "verify" or (root / "harness" / "dist.py").is_file()
