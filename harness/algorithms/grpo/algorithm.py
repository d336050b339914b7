"""The GRPO algorithm as the registry sees it (entry point `grpo` of `ppo_stats_harness.algorithms`).

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

    from .spec import GRPOSpec


TARGETS = {
    "reference-grpo": "harness.algorithms.grpo.targets.reference:factory",
    "trl-grpo": "harness.algorithms.grpo.targets.trl:build [trl]",
    "verl": "harness.algorithms.grpo.targets.verl:build [verl]",
    "openrlhf": "harness.algorithms.grpo.targets.openrlhf:build [openrlhf]",
}
"""Built-in target name -> `module:factory` (loaded by name at run time, never imported here), then in brackets the
package's install extras it needs (`trl`: today's TRL)."""
TARGETS_WITH_ARGUMENT = {"trl-grpo": "harness.algorithms.grpo.targets.trl:build_for [trl]"}
"""`NAME:ARGUMENT` targets: a function of ARGUMENT that returns the factory (`trl-grpo:my_pkg.grpo_trainer`)."""
LIVE = Live(
    names=(
        ("LiveCheck", "harness.algorithms.grpo.targets.live.trl:LiveCheck"),
        ("live_reference", "harness.algorithms.grpo.targets.live.reference:live_reference"),
        ("check_interval", "harness.algorithms.grpo.live:check_interval"),
        ("merge_ranks", "harness.algorithms.grpo.live:merge_ranks"),
    ),
    demo="harness.algorithms.grpo.targets.live.demo:main",
)
"""Live mode (docs/live.md): `LiveCheck` for TRL's GRPOTrainer, `live_reference` for the reference trainer, the check
of an interval, and the demonstration of `python -m harness.live --target trl-grpo | reference-grpo`."""


@dataclass(frozen=True)
class GRPOAlgorithm:
    """GRPO: the scenarios of docs/grpo-metrics.md, run on `GRPOSpec`s."""

    name: str = "grpo"
    default_target: str = "reference-grpo"
    targets: Mapping[str, str] = field(default_factory=lambda: dict(TARGETS))
    targets_with_argument: Mapping[str, str] = field(default_factory=lambda: dict(TARGETS_WITH_ARGUMENT))
    instruments: Instruments = INSTRUMENTS
    """None of its own: the GRPO checks read the loss records a GRPO run keeps itself."""
    tolerances: Mapping[str, tuple[tuple[float, ...], ...]] = field(default_factory=lambda: dict(ROWS))
    contract: Contract = CONTRACT
    """Its contract's version and history (versions.py; harness/contract.py)."""
    definitions: Vocabulary = VOCABULARY
    """The definitions a target may declare, and their profiles (definitions.py; harness/definitions.py)."""
    live: Live | None = LIVE
    bench: Bench | None = Bench(live_run="harness.algorithms.grpo.targets.live.bench")
    """The run `python -m harness.bench --live` measures under `live_reference` (targets/live/bench.py)."""
    mutation: Mutation | None = Mutation(
        ("reference_trainers/grpo.py", "reference_trainers/grpo_config.py", "reference_trainers/common.py"),
        "equivalent_grpo.toml",
        "grpo",
        id_prefix="g",
        catalogue="mutants/catalogue",
        unit_tests=("tests/trainers/test_grpo_config.py",),
        rank_functions=(
            *(f"reference_trainers.grpo:GRPOTrainer.{name}"
              for name in ("next_prompts", "generate", "score", "micro_step", "window_step", "log_interval",
                           "entropy_bonus_window", "with_entropy_bonus")),
            "reference_trainers.grpo:high_entropy_mask",
        ),  # fmt: skip
    )

    @property
    def scenarios(self) -> Sequence[Scenario]:
        """The pooling, gradient, reward, mask and forward scenarios, in report order."""
        from .scenarios import SCENARIOS

        return SCENARIOS

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> GRPOSpec:
        """The run-wide settings every GRPO scenario spec takes (`settings`: from `verify --set`)."""
        from .spec import GRPOSpec

        return GRPOSpec(seed=seed, device=device, dtype=dtype, **(settings or {}))

    def parse_settings(self, assignments: list[str]) -> dict:
        """`verify --set KEY=VALUE` assignments as settings (HarnessConfigError listing the keys)."""
        from .spec import parse_settings

        return parse_settings(assignments)

    def impossible_spec(self, run_spec: GRPOSpec) -> GRPOSpec:
        """A generation batch of 3 * 2 completions in groups of 4."""
        return run_spec.with_(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=4)

    def rank_specs(self, seed: int, settings: dict | None = None) -> dict[str, GRPOSpec]:
        """The runs each rank of `verify-dist` makes (`settings`: from `verify-dist --set`)."""
        from . import ranks

        return ranks.rank_specs(seed, settings)

    def rank_reads(self, processes: int) -> dict:
        """Every check of `verify-dist` on `processes` ranks, by id, with the names of the runs it reads."""
        from . import ranks

        return ranks.rank_reads(processes)

    def for_rank(self, spec: GRPOSpec, rank: int, world_size: int) -> GRPOSpec:
        """Every rank runs the same spec (the trainer reads its rank from the process group)."""
        return spec

    def rank_checks(self, runs: Mapping[str, Sequence[Ran]], target: Any = None,
                    settings: dict | None = None) -> list[CheckResult]:  # fmt: skip
        """The checks of `verify-dist` on every rank's runs (those whose runs are all there), `target`'s
        declarations held as on one process: a declared optional metric must be logged there too, a declared
        unlogged one is left out, and the oracle takes its declared definitions."""
        from . import ranks

        return ranks.rank_checks(dict(runs), ranks.Declared.of(target), settings)


GRPO = GRPOAlgorithm()
