"""`python -m harness verify ARGS` as a user runs it, for the tests that hold the gate to its exit codes (each run
forked from the worker's gate server where it is the same run: tests/support/forked.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.docs import documented
from tests.support import forked

ROOT = Path(__file__).resolve().parents[2]


def verify(report_dir: Path, *args: str, timeout: float = 1800, pythonpath: Path | None = None
           ) -> tuple[int, dict, str]:  # fmt: skip
    """(exit code, verify.json as data or {} when none was written, stdout and stderr); `pythonpath`: a folder
    searched before the project (a patched module's package). A PYTHONPATH the tests run under (`nox -s tests`
    puts TRL's newest release there for its module) comes after the project."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = os.pathsep.join([*([str(pythonpath)] if pythonpath is not None else []), str(ROOT), *inherited])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "GITHUB_STEP_SUMMARY": "",
           "TRL_EXPERIMENTAL_SILENCE": "1"}  # fmt: skip
    proc = forked.run([sys.executable, "-m", "harness", "verify", "--report-dir", str(report_dir), *args],
                      cwd=ROOT, env=env, timeout=timeout)  # fmt: skip
    path = report_dir / "verify.json"
    return proc.returncode, (json.loads(path.read_text()) if path.exists() else {}), proc.stdout + proc.stderr


def verify_dist(tmp_path, target: str, *extra: str) -> tuple[int, dict, str]:
    """`python -m harness verify-dist --target TARGET ARGS` from the project's root: (exit code, dist/verify.json as
    data or {} when none was written, stdout and stderr)."""
    proc = forked.run([sys.executable, "-m", "harness", "verify-dist", "--target", target, "--report-dir",
                       str(tmp_path), *extra], cwd=ROOT, timeout=600,
                      env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})  # fmt: skip
    path = tmp_path / "dist" / "verify.json"
    return proc.returncode, (json.loads(path.read_text()) if path.exists() else {}), proc.stdout + proc.stderr


def documented_run(line: str, test_file: str, report_dir: Path, timeout: float = 600) -> tuple[int, dict, str]:
    """A `python -m harness verify | verify-dist ...` command of the docs, word for word as tests/docs/documented.py
    registers it for `test_file`, with `--report-dir report_dir` appended, from the project's root: (exit code, its
    verify.json as data or {} when none was written, stdout and stderr)."""
    assigned, args = documented.argv(line, test_file)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = os.pathsep.join([*filter(None, [assigned.pop("PYTHONPATH", "")]), str(ROOT), *inherited])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GITHUB_STEP_SUMMARY": "", "TRL_EXPERIMENTAL_SILENCE": "1",
           **assigned, "PYTHONPATH": path}  # fmt: skip
    proc = forked.run([*args, "--report-dir", str(report_dir)], cwd=ROOT, env=env, timeout=timeout)
    report = report_dir / ("dist" if "verify-dist" in args else "") / "verify.json"
    return proc.returncode, (json.loads(report.read_text()) if report.exists() else {}), proc.stdout + proc.stderr
