"""The PPO algorithm as the registry sees it (entry point `ppo` of `ppo_stats_harness.algorithms`).

Light at import: the scenarios, ranks and spec (which import torch) load when first asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.algorithms import Bench, Live, Mutation
from harness.contract import Contract
from harness.definitions import Vocabulary

from .definitions import VOCABULARY
from .instruments import INSTRUMENTS
from .tolerances import ROWS
from .versions import CONTRACT

if TYPE_CHECKING:
    from harness.instrument.observe import Instruments, Ran
    from harness.scenario import Scenario
    from harness.verdict import CheckResult

    from .spec import ScenarioSpec


TARGETS = {
    "reference": "harness.algorithms.ppo.targets.reference:factory",
    "trl": "harness.algorithms.ppo.targets.trl:factory [trl-ppo]",
}
"""Built-in target name -> `module:factory` (loaded by name at run time, never imported here), then in brackets the
package's install extras it needs (`trl-ppo`: TRL 1.12.0, the last release with a PPOTrainer)."""
TARGETS_WITH_ARGUMENT = {"trl": "harness.algorithms.ppo.targets.trl:factory_for [trl-ppo]"}
"""`NAME:ARGUMENT` targets: a function of ARGUMENT that returns the factory (`trl:my_pkg.ppo_trainer`)."""


@dataclass(frozen=True)
class PPOAlgorithm:
    """PPO: the scenarios of docs/metrics.md, run on `ScenarioSpec`s."""

    name: str = "ppo"
    default_target: str = "reference"
    targets: Mapping[str, str] = field(default_factory=lambda: dict(TARGETS))
    targets_with_argument: Mapping[str, str] = field(default_factory=lambda: dict(TARGETS_WITH_ARGUMENT))
    instruments: Instruments = INSTRUMENTS
    """The spy on masked_mean and selective_log_softmax, the value head's and reward model's recorders."""
    tolerances: Mapping[str, tuple[tuple[float, ...], ...]] = field(default_factory=lambda: dict(ROWS))
    contract: Contract = CONTRACT
    """Its contract's version and history (versions.py; harness/contract.py)."""
    definitions: Vocabulary = VOCABULARY
    """The definitions a target may declare, and their profiles (definitions.py; harness/definitions.py)."""
    live: Live | None = None
    """No live mode."""
    bench: Bench | None = Bench(
        sizes="harness.algorithms.ppo.bench:SIZES", oracle="harness.algorithms.ppo.bench:ORACLE"
    )
    """The gate's bench: its sizes and its oracle, timed (bench.py)."""
    mutation: Mutation | None = Mutation(
        ("reference_trainers/ppo.py", "reference_trainers/ppo_config.py", "reference_trainers/common.py"),
        "equivalent.toml",
        None,
        id_prefix="c",
        catalogue="mutants/catalogue",
    )

    @property
    def scenarios(self) -> Sequence[Scenario]:
        """The PPO scenarios (harness.algorithms.ppo.scenarios.pooled.SCENARIOS)."""
        from .scenarios import SCENARIOS

        return SCENARIOS

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> ScenarioSpec:
        """The run-wide settings every PPO scenario spec takes (`settings`: from `verify --set`)."""
        from .spec import ScenarioSpec

        return ScenarioSpec(seed=seed, device=device, dtype=dtype, **(settings or {}))

    def parse_settings(self, assignments: list[str]) -> dict:
        """`verify --set KEY=VALUE` assignments as settings (HarnessConfigError listing the keys)."""
        from .spec import parse_settings

        return parse_settings(assignments)

    def impossible_spec(self, run_spec: ScenarioSpec) -> ScenarioSpec:
        """A local batch of 12 rows in 5 minibatches."""
        return run_spec.with_(per_device_train_batch_size=4, gradient_accumulation_steps=3, num_mini_batches=5)

    def rank_specs(self, seed: int, settings: dict | None = None) -> dict[str, ScenarioSpec]:
        """The runs each rank of `verify-dist` makes (`settings`: from `verify-dist --set`)."""
        from . import ranks

        return ranks.rank_specs(seed, settings)

    def rank_reads(self, processes: int) -> dict:
        """Every check of `verify-dist` on `processes` ranks, by id, with the names of the runs it reads."""
        from . import ranks

        return ranks.rank_reads(processes)

    def for_rank(self, spec: ScenarioSpec, rank: int, world_size: int) -> ScenarioSpec:
        """PPO's specs vary the padding by rank."""
        return spec.with_(rank=rank, world_size=world_size)

    def rank_checks(self, runs: Mapping[str, Sequence[Ran]], target: Any = None,
                    settings: dict | None = None) -> list[CheckResult]:  # fmt: skip
        """The checks of `verify-dist` on every rank's runs; the metrics `target` declares its trainer does not log
        are left out as on one process (the PPO contract has no optional metric to declare)."""
        from . import ranks

        return ranks.rank_checks(dict(runs), settings, tuple(target.unlogged_metrics) if target is not None else ())


PPO = PPOAlgorithm()
