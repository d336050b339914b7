"""The bench's command: memory weighed before the steady heap, the timed rounds under it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow  # a bench process, and the verify gate it times: the full tier
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_small_bench_weighs_memory_first_then_times_its_rounds_under_the_steady_heap():
    """One round of the toy size, as `nox -s bench -- --repeat 1` runs it: the memory line says where its peaks
    come from, the heap line comes before the overhead's, and each arm's faults are shown run by run; without the
    verify gate's wall time (`--no-verify`: a whole gate process, which the gate's own tests run)."""
    command = [sys.executable, "-m", "harness.bench", "--repeat", "1", "--no-copies", "--no-verify"]
    env = {"OMP_NUM_THREADS": "1", "PATH": ""}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    first = {key: next(i for i, line in enumerate(lines) if line.startswith(key)) for key in ("heap", "overhead")}
    assert first["heap"] < first["overhead"], proc.stdout
    assert lines[first["heap"]].startswith("heap       steady for the timed rounds")
    memory = next(line for line in lines if line.startswith("memory"))
    assert "(one untimed run each, before the steady heap)" in memory
    assert re.search(r"faults bare \S+ \| spied \S+ minor page faults \(medians; runs [\d.]+ s/\d+k? and", proc.stdout)
    assert re.search(r"grad_after_step +[\d.]+ m?s +[\d.]+% +2 calls", proc.stdout), proc.stdout
    assert "recording  vocab 256:" in proc.stdout and "verify     wall" not in proc.stdout
