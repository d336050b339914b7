"""A made-up third algorithm (tests/support/third_algorithm/) runs through `python -m harness verify`.

It touches no file of the harness: its package and one entry-point line in its own
`*.dist-info/entry_points.txt`, found on PYTHONPATH as an installed distribution would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import forked

HERE = Path(__file__).resolve().parents[3] / "tests" / "support" / "third_algorithm"
pytestmark = pytest.mark.slow  # three processes, as a user runs them, with the algorithm registered


def harness(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "GITHUB_STEP_SUMMARY": "", "OMP_NUM_THREADS": "1"}  # fmt: skip
    return forked.run([sys.executable, "-m", "harness", *args], env=env, cwd=tmp_path, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess, dict]]:
    """The made-up algorithm's gate on its correct and its broken trainer, and its check list."""
    tmp = tmp_path_factory.mktemp("third")
    out = {}
    for target in ("tokenmean-reference", "tokenmean-broken"):
        proc = harness("verify", "--target", target, "--report-dir", str(tmp / target), tmp_path=tmp)
        report = json.loads((tmp / target / "verify.json").read_text())
        out[target] = (proc, report)
    out["checks"] = (harness("checks", "--target", "tokenmean-reference", tmp_path=tmp), {})
    return out


def test_the_registered_algorithm_lists_its_check(runs):
    proc, _ = runs["checks"]
    assert proc.returncode == 0 and proc.stdout.split() == ["token_mean"], proc.stderr


def test_its_correct_trainer_passes(runs):
    proc, report = runs["tokenmean-reference"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["algorithm"] == "tokenmean"
    assert [(c["id"], c["status"]) for c in report["checks"]] == [("token_mean", "pass")]
    (metric, _) = report["checks"][0]["metrics"]  # both updates compared
    assert metric["name"] == "toy/token_mean" and metric["abs_err"] < 1e-6


def test_its_broken_trainer_fails_on_its_metric(runs):
    proc, report = runs["tokenmean-broken"]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (check,) = report["checks"]
    assert check["status"] == "fail" and all(m["status"] == "fail" for m in check["metrics"])
    assert "FAIL  token_mean" in proc.stdout
