"""The algorithm is never guessed: a factory names its own, its run must fit it, and `case(id)` finds it from the id.

A factory of your own that names no algorithm, or whose run is shaped for another algorithm than the one it
names, is one line and exit 2 before any check runs (harness/targets/__init__.py, harness/preflight.py),
naming the `algorithm` to set; it used to run the PPO gate and fail every check with an AttributeError.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import algorithms
from harness.algorithms import case
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.targets.reference import factory as grpo_factory
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.algorithms.ppo.targets.reference import factory as ppo_factory
from harness.errors import HarnessConfigError
from harness.preflight import preflight
from harness.targets import resolve
from tests.support import forked
from tests.support.gate_run import ROOT

HERE = "tests.harness.targets.test_algorithm_declared"


def undeclared(spec):
    """The reference GRPO trainer behind a factory that does not say it is GRPO's."""
    return grpo_factory(spec)


def ppo_declared_grpo_run(spec):
    """Says "ppo", makes a GRPO spec of its own, and returns a GRPO-shaped run (it has `loss_inputs`)."""
    return grpo_factory(GRPOSpec(seed=spec.seed, device=spec.device, dtype=spec.dtype))


ppo_declared_grpo_run.algorithm = "ppo"


def ppo_declared_grpo_factory(spec):
    """Says "ppo" and hands the PPO spec to a GRPO factory, which reads a field that spec lacks."""
    return grpo_factory(spec)


ppo_declared_grpo_factory.algorithm = "ppo"


def grpo_declared_ppo_run(spec):
    """Says "grpo" and returns a PPO-shaped run (no `loss_inputs`)."""
    return ppo_factory(ScenarioSpec(seed=spec.seed, device=spec.device, dtype=spec.dtype))


grpo_declared_ppo_run.algorithm = "grpo"


def declared_ppo(spec):
    """The reference PPO trainer, its algorithm named."""
    return ppo_factory(spec)


declared_ppo.algorithm = "ppo"


def harness(*args: str) -> subprocess.CompletedProcess:
    """`python -m harness ARGS` from the repository root, as a user runs it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "GITHUB_STEP_SUMMARY": ""}
    return forked.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, timeout=600)


def test_a_factory_that_names_no_algorithm_is_one_line_and_exit_2():
    proc = harness("verify", "--target", f"{HERE}:undeclared", "--check", "short_window")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: target '{HERE}:undeclared' names no algorithm: "
        'set `undeclared.algorithm = "ppo"` on the factory (or "grpo")'
    ]
    listed = harness("checks", "--target", f"{HERE}:undeclared")
    assert listed.returncode == 2 and len(listed.stderr.splitlines()) == 1 and "names no algorithm" in listed.stderr


@pytest.mark.slow  # gate processes: the full tier
def test_a_ppo_declared_factory_returning_a_grpo_run_is_one_line_and_exit_2():
    proc = harness("verify", "--target", f"{HERE}:ppo_declared_grpo_run", "--check", "freshness")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: target '{HERE}:ppo_declared_grpo_run' is declared 'ppo', but its run")
    assert "has `loss_inputs`" in line
    assert line.endswith('set `ppo_declared_grpo_run.algorithm = "grpo"` on the factory')


def test_a_ppo_declared_factory_that_reads_a_grpo_field_names_the_algorithm_whose_spec_has_it():
    with pytest.raises(HarnessConfigError) as raised:
        preflight(f"{HERE}:ppo_declared_grpo_factory")
    message = str(raised.value)
    assert "\n" not in message
    assert "reads spec.steps_per_generation, which a ppo spec (ScenarioSpec) lacks" in message
    assert message.endswith('set `ppo_declared_grpo_factory.algorithm = "grpo"` on the factory')


def test_a_grpo_declared_factory_returning_a_ppo_run_is_a_configuration_error():
    with pytest.raises(HarnessConfigError, match=r"has no `loss_inputs`.*set `grpo_declared_ppo_run\.algorithm = "
                       r"\"ppo\"` on the factory$"):  # fmt: skip
        preflight(f"{HERE}:grpo_declared_ppo_run")


def test_a_declared_factory_and_the_built_in_targets_resolve_to_their_algorithm():
    assert resolve(f"{HERE}:declared_ppo").algorithm == "ppo"
    assert resolve("reference").algorithm == "ppo"
    assert resolve("reference-grpo").algorithm == "grpo"
    assert preflight(f"{HERE}:declared_ppo").algorithm.name == "ppo"
    assert preflight("reference-grpo").algorithm.name == "grpo"


def test_case_finds_the_algorithm_from_an_id_only_one_algorithm_has():
    assert case("short_window").scenario.check.__module__.startswith("harness.algorithms.grpo")
    assert case("uneven_split[epochs=1]").scenario.check.__module__.startswith("harness.algorithms.ppo")
    with pytest.raises(KeyError, match="no check 'short_window' in ppo"):
        case("short_window", "ppo")


def test_an_id_two_algorithms_have_is_the_sessions_target_s_or_must_be_named(monkeypatch):
    # inside a gate session, the --ppo-target's algorithm (this session's is the default, `reference`)
    assert case("freshness").scenario.check.__module__.startswith("harness.algorithms.ppo")
    monkeypatch.setattr(algorithms, "SESSION_ALGORITHMS", [lambda: "grpo"])
    assert case("freshness").scenario.check.__module__.startswith("harness.algorithms.grpo")
    assert case("all_masked").scenario.check.__module__.startswith("harness.algorithms.grpo")
    # outside one, it is not guessed
    monkeypatch.setattr(algorithms, "SESSION_ALGORITHMS", [])
    with pytest.raises(KeyError, match=r"check 'freshness' is a check of ppo and grpo: name the algorithm"):
        case("freshness")
    assert case("freshness", "grpo").scenario.check.__module__.startswith("harness.algorithms.grpo")
