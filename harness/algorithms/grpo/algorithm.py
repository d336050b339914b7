"""The GRPO algorithm as the registry sees it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.instrument.observe import Ran
from harness.scenario import Scenario
from harness.verdict import CheckResult

from . import ranks
from .gradient_checks import LOGP_GRADIENT
from .reward_scenarios import REWARD_SCENARIOS
from .scenarios import SCENARIOS
from .spec import GRPOSpec, parse_settings


@dataclass(frozen=True)
class GRPOAlgorithm:
    """GRPO: the scenarios of docs/grpo-metrics.md, run on `GRPOSpec`s."""

    name: str = "grpo"
    scenarios: tuple[Scenario, ...] = (*SCENARIOS, LOGP_GRADIENT, *REWARD_SCENARIOS)
    spy: bool = False
    """The GRPO checks read the loss records a GRPO run keeps itself, not the spy's."""

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> GRPOSpec:
        """The run-wide settings every GRPO scenario spec takes (`settings`: from `verify --set`)."""
        return GRPOSpec(seed=seed, device=device, dtype=dtype, **(settings or {}))

    def parse_settings(self, assignments: list[str]) -> dict:
        """`verify --set KEY=VALUE` assignments as settings (HarnessConfigError listing the keys)."""
        return parse_settings(assignments)

    def rank_specs(self, seed: int) -> dict[str, GRPOSpec]:
        """The runs each rank of `verify-dist` makes."""
        return ranks.rank_specs(seed)

    def rank_checks(self, runs: dict[str, Sequence[Ran]]) -> list[CheckResult]:
        """The checks of `verify-dist` on every rank's runs."""
        return ranks.rank_checks(runs)


GRPO = GRPOAlgorithm()
