"""examples/: the two example trainer repositories (tinyppo, PPO; tinygrpo, GRPO) use the gate from outside this
one, as `nox -s example` runs them: this package's wheel and both examples in one fresh venv; for each, `ppo-verify`
on its trainer exits 0, its own tests pass, and its broken variant exits 1. Before the examples are installed, the
wheel with no extra and TRL run live mode: a TRL GRPOTrainer run with LiveCheck has its logs checked, with none of
the test dependencies installed (noxfile.py, `live_without_extras`).

Slow (CI runs it: `nox -s tests` names the interpreter that has nox in PPO_HARNESS_NOX); skips where no interpreter
with nox is known.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import documented

ROOT = Path(__file__).resolve().parents[2]


def nox_python() -> str | None:
    """An interpreter that runs nox: the one `nox -s tests` names, else this one where it has nox, else None."""
    if os.environ.get("PPO_HARNESS_NOX"):
        return os.environ["PPO_HARNESS_NOX"]
    return sys.executable if importlib.util.find_spec("nox") is not None else None


@pytest.mark.slow
def test_the_examples_pass_the_gate_from_a_wheel_and_their_broken_variants_fail_it():
    python = nox_python()
    if python is None:
        pytest.skip("no interpreter with nox here: `nox -s tests` runs this test, `nox -s example` the session")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # the session's pytest runs its own
    _, args = documented.argv("nox -s example", __file__, nox=[python, "-m", "nox", "-f", str(ROOT / "noxfile.py")])
    done = subprocess.run(args, cwd=ROOT, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert "live mode with no extra: LiveCheck checked 2 logs of a TRL" in log, log[-6000:]
    assert "without pytest, hypothesis, xdist, tensorboard" in log, log[-6000:]
    for package in ("tinyppo", "tinygrpo"):  # each step of each example said so, in the session's log
        assert f"the {package} trainer passes the gate (exit 0)" in log, log[-6000:]
        assert f"{package}'s own tests pass" in log, log[-6000:]
        assert f"the broken {package} trainer fails the gate (exit 1), as it must" in log, log[-6000:]
