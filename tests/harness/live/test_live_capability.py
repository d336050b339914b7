"""Live mode is a capability an algorithm declares (`Algorithm.live`): `harness.live` and `python -m harness.live`
find it through the registry, so the made-up third algorithm (tests/support/third_algorithm/) runs live mode with
no file of the harness touched, and an algorithm without one gets a one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.algorithms import get, with_live
from harness.live.demo import main, target_of

ROOT = Path(__file__).resolve().parents[3]
THIRD = ROOT / "tests" / "support" / "third_algorithm"


def with_third(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`python args...` with the made-up algorithm registered (its dist-info on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(THIRD), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)  # fmt: skip


def test_only_the_algorithms_that_declare_live_mode_have_one():
    assert with_live() == ["grpo"]
    assert get("ppo").live is None
    assert dict(get("grpo").live.names)["LiveCheck"].endswith(":LiveCheck")


def test_a_target_of_an_algorithm_without_live_mode_is_one_line(capsys):
    assert main(["--target", "reference"]) == 2  # PPO's reference trainer
    out, err = capsys.readouterr()
    assert out == "" and err == ("error: python -m harness.live: target 'reference' is of algorithm 'ppo', which has "
                                 "no live mode (algorithms with one: grpo)\n")  # fmt: skip


@pytest.mark.parametrize("argv, target", [(["--target", "x", "--every", "2"], "x"), (["--target=y"], "y"), ([], None)])
def test_the_target_is_read_from_the_arguments(argv, target):
    assert target_of(argv) == target


@pytest.mark.slow  # two processes with the made-up algorithm registered
def test_the_third_algorithm_runs_live_mode_through_its_declaration(tmp_path):
    good = with_third("-m", "harness.live", "--target", "tokenmean-reference", tmp_path=tmp_path)
    assert good.returncode == 0, good.stderr
    assert "live check log 3 (step 3): pass, 1 metric(s)" in good.stderr
    assert "live check: 3 interval(s) checked, 3 passed, 0 failed" in good.stderr
    bad = with_third("-m", "harness.live", "--target", "tokenmean-broken", "--every", "2", tmp_path=tmp_path)
    assert bad.returncode == 1, bad.stderr
    assert "FAIL live toy/token_mean @ log 3 (step 3)" in bad.stderr
    assert "live check: 2 interval(s) checked, 0 passed, 2 failed, failed: logs 1, 3" in bad.stderr


@pytest.mark.slow
def test_the_third_algorithms_names_are_harness_lives_and_ppo_still_has_none(tmp_path):
    names = "import harness.live as l; print(l.tokenmean_check.__module__, l.check_interval.__module__)"
    said = with_third("-c", names, tmp_path=tmp_path)
    assert said.stdout.split() == ["tokenmean.live", "harness.algorithms.grpo.live"], said.stderr
    ppo = with_third("-m", "harness.live", "--target", "reference", tmp_path=tmp_path)
    assert ppo.returncode == 2 and ppo.stderr.splitlines() == [
        "error: python -m harness.live: target 'reference' is of algorithm 'ppo', which has no live mode (algorithms "
        "with one: grpo, tokenmean)"
    ]
