"""The gate across two processes, as one test: `python -m harness verify-dist` against the session's target.

`python -m mutants mutmut` runs it beside the verify suite on the mutants of the functions whose code depends on
the process group (an algorithm's `Mutation.rank_functions`, harness/algorithms/__init__.py): their rank slices,
world factors and `no_sync` contexts change nothing on one process. The ranks are fresh interpreters started from
the working directory, so they import the trainer found there, and they inherit the environment, which says
which mutant is active.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TIMEOUT = 300
"""Seconds the whole two-process run may take (verify-dist's own default)."""


def test_the_gate_across_two_processes(pytestconfig, tmp_path):
    """verify-dist on 2 CPU ranks exits 0; its failure lines and the ranks' output tail are the test's failure."""
    target, seed = pytestconfig.getoption("ppo_target"), pytestconfig.getoption("ppo_seed")
    here = os.getcwd()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)}
    command = [sys.executable, "-m", "harness", "verify-dist", "--target", target, "--seed", str(seed),
               "--timeout", str(TIMEOUT), "--report-dir", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
        shown = "\n".join(failed[:20]) or (done.stdout + done.stderr)[-3000:]
        pytest.fail(f"verify-dist --target {target} exited {done.returncode}:\n{shown}", pytrace=False)
