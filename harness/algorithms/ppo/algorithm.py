"""The PPO algorithm as the registry sees it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.instrument.observe import Ran
from harness.scenario import Scenario
from harness.verdict import CheckResult

from . import ranks
from .scenarios import SCENARIOS
from .spec import ScenarioSpec, parse_settings


@dataclass(frozen=True)
class PPOAlgorithm:
    """PPO: the scenarios of docs/metrics.md, run on `ScenarioSpec`s."""

    name: str = "ppo"
    scenarios: tuple[Scenario, ...] = SCENARIOS

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> ScenarioSpec:
        """The run-wide settings every PPO scenario spec takes (`settings`: from `verify --set`)."""
        return ScenarioSpec(seed=seed, device=device, dtype=dtype, **(settings or {}))

    def parse_settings(self, assignments: list[str]) -> dict:
        """`verify --set KEY=VALUE` assignments as settings (HarnessConfigError listing the keys)."""
        return parse_settings(assignments)

    def rank_specs(self, seed: int) -> dict[str, ScenarioSpec]:
        """The runs each rank of `verify-dist` makes."""
        return ranks.rank_specs(seed)

    def rank_checks(self, runs: dict[str, Sequence[Ran]]) -> list[CheckResult]:
        """The checks of `verify-dist` on every rank's runs."""
        return ranks.rank_checks(runs)


PPO = PPOAlgorithm()
