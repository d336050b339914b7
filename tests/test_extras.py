"""The package's extras (pyproject.toml) and constraints.txt say what the harness and noxfile.py rely on: the `trl`
extra installs today's TRL (the GRPO adapter's release, baselines/trl-1.16.0-grpo.toml) and `trl-ppo` TRL 1.12.0
(the last with a PPOTrainer); both bring `requests` and the gate's engine; the engine (`gate`) is no core
dependency; constraints.txt pins no trl (two extras, two releases) and keeps torch pinned."""

from __future__ import annotations

import re
from pathlib import Path

from harness import needs
from harness.targets.hf import TRL_NEWEST, TRL_VERSION

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = PROJECT["optional-dependencies"]


def names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.-]+", r)[0].lower() for r in requirements}


def test_the_trl_extras_pin_the_releases_the_adapters_name():
    assert f"trl=={TRL_NEWEST}" in EXTRAS["trl"]
    assert f"trl=={TRL_VERSION}" in EXTRAS["trl-ppo"]
    assert (ROOT / "baselines" / f"trl-{TRL_NEWEST}-grpo.toml").is_file()


def test_each_trl_extra_brings_requests_and_the_gates_engine():
    for extra in ("trl", "trl-ppo"):
        assert {"requests", *names(EXTRAS["gate"])} <= names(EXTRAS[extra]), extra
    # the engine needs no pytest (harness/engine.py): the gate extra is Hypothesis alone, and the TRL extras bring none
    assert names(EXTRAS["gate"]) == {"hypothesis"} and {"pytest", "hypothesis"} <= names(EXTRAS["test"])
    assert not any("pytest" in names(EXTRAS[extra]) for extra in ("gate", "trl", "trl-ppo"))


def test_the_engine_and_the_test_tools_are_no_core_dependency():
    core = names(PROJECT["dependencies"])
    assert not core & {"pytest", "hypothesis", "pytest-xdist", "tensorboard", "trl"}


def test_what_a_missing_engine_says_to_install_is_an_extra_that_exists():
    assert needs.GATE == "pip install 'ppo-stats-harness[gate]'" and "gate" in EXTRAS
    assert needs.TRL == "pip install 'ppo-stats-harness[trl]'"


def test_constraints_pin_no_trl_and_keep_torch():
    pins = [line.strip() for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]  # fmt: skip
    assert not [pin for pin in pins if re.match(r"trl\s*[=<>!~]", pin)]
    assert "torch==2.13.0" in pins
