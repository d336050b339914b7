"""The GRPO algorithm as the registry sees it."""

from __future__ import annotations

from dataclasses import dataclass

from harness.scenario import Scenario

from .scenarios import SCENARIOS
from .spec import GRPOSpec, parse_settings


@dataclass(frozen=True)
class GRPOAlgorithm:
    """GRPO: the scenarios of docs/grpo-metrics.md, run on `GRPOSpec`s."""

    name: str = "grpo"
    scenarios: tuple[Scenario, ...] = SCENARIOS

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> GRPOSpec:
        """The run-wide settings every GRPO scenario spec takes (`settings`: from `verify --set`)."""
        return GRPOSpec(seed=seed, device=device, dtype=dtype, **(settings or {}))

    def parse_settings(self, assignments: list[str]) -> dict:
        """`verify --set KEY=VALUE` assignments as settings (HarnessConfigError listing the keys)."""
        return parse_settings(assignments)


GRPO = GRPOAlgorithm()
