"""The registry of algorithms. An algorithm is one folder: its contract, spec, view, expectations, scenarios, targets.

Each registered algorithm satisfies `Algorithm`; adding one (GRPO) is adding a sibling
folder and a line here. Modules are imported only when asked for, so that loading the
pytest plugin imports no torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from harness.errors import HarnessConfigError
from harness.scenario import Case, Scenario

DEFAULT_ALGORITHM = "ppo"
_ALGORITHMS = {"ppo": "harness.algorithms.ppo.algorithm:PPO", "grpo": "harness.algorithms.grpo.algorithm:GRPO"}
"""name -> where its `Algorithm` object lives."""
_TARGET_TABLES = {"ppo": "harness.algorithms.ppo.targets", "grpo": "harness.algorithms.grpo.targets"}
"""name -> a light module (no torch) whose `TARGETS` maps built-in target names to `module:factory`, and whose
optional `TARGETS_WITH_ARGUMENT` maps names of `NAME:ARGUMENT` targets to `module:function` (ARGUMENT -> factory)."""


class Algorithm(Protocol):
    """What the gate needs of an algorithm."""

    name: str
    scenarios: Sequence[Scenario]

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> Any:
        """The run-wide settings every scenario spec of this algorithm takes."""
        ...

    def parse_settings(self, assignments: list[str]) -> dict:
        """`--set KEY=VALUE` assignments as typed settings (HarnessConfigError listing the keys)."""
        ...


def known_algorithms() -> list[str]:
    """The registered algorithm names."""
    return list(_ALGORITHMS)


def get(name: str) -> Algorithm:
    """The registered algorithm `name` (HarnessConfigError for an unknown one)."""
    if name not in _ALGORITHMS:
        raise HarnessConfigError(f"unknown algorithm {name!r}; known: {', '.join(known_algorithms())}")
    module, _, attr = _ALGORITHMS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def builtin_targets() -> Mapping[str, tuple[str, str]]:
    """Every built-in target name -> (algorithm, `module:factory`)."""
    out: dict[str, tuple[str, str]] = {}
    for algorithm, table in _TARGET_TABLES.items():
        for target, path in importlib.import_module(table).TARGETS.items():
            out[target] = (algorithm, path)
    return out


def builtin_targets_with_argument() -> Mapping[str, tuple[str, str]]:
    """Every built-in `NAME:ARGUMENT` target name -> (algorithm, `module:function`), the function taking ARGUMENT."""
    out: dict[str, tuple[str, str]] = {}
    for algorithm, table in _TARGET_TABLES.items():
        for target, path in getattr(importlib.import_module(table), "TARGETS_WITH_ARGUMENT", {}).items():
            out[target] = (algorithm, path)
    return out


def cases(name: str) -> list[Case]:
    """Every check of algorithm `name`, one case per point of each scenario's sweep."""
    return [case for scenario in get(name).scenarios for case in scenario.cases()]


def check_ids(name: str = DEFAULT_ALGORITHM) -> dict[str, str]:
    """Check id -> scenario name, for every check of algorithm `name` (the mutant catalogue names these)."""
    return {str(case.id): case.scenario.name for case in cases(name)}


def case(check_id: str, name: str = DEFAULT_ALGORITHM) -> Case:
    """The case of algorithm `name` whose check id is `check_id` (KeyError naming the known ids otherwise)."""
    found = {str(c.id): c for c in cases(name)}
    if check_id not in found:
        raise KeyError(f"no check {check_id!r} in {name}; known: {', '.join(found)}")
    return found[check_id]
