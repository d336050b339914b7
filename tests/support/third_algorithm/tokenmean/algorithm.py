"""The made-up algorithm as the gate's registry sees it: every member of `harness.algorithms.Algorithm`."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from harness.algorithms import Live, Mutation
from harness.compare import compare
from harness.contract import Contract
from harness.errors import HarnessConfigError
from harness.instrument.observe import Recording
from harness.instrument.spy import Spy
from harness.oracle.pooling import Expectation
from harness.require import require, require_ran
from harness.scenario import Scenario
from harness.verdict import Check

from . import trainer
from .tolerances import ROWS, TOLERANCES

METRIC = "toy/token_mean"


@dataclass(frozen=True)
class Spied:
    """The algorithm's record of a run (`Ran.payload`): the spy's records, in call order."""

    records: tuple = ()


class SpyAlone:
    """Its instruments (`harness.instrument.observe.Instruments`): the spy on the trainer's module, nothing else."""

    members: tuple[str, ...] = ()
    reads = "spy's records"

    @contextlib.contextmanager
    def install(self, run, spy: bool = True):
        with Spy(run.module) if spy else contextlib.nullcontext() as watcher:
            records = lambda: watcher.finished() if watcher else ()  # noqa: E731
            yield Recording(lambda: len(watcher.records) if watcher else 0, lambda done: Spied(tuple(records())))


@dataclass(frozen=True)
class TokenMeanSpec:
    """A run: `rows` rows cut into micro-batches of `micro` rows."""

    instruments: ClassVar[SpyAlone] = SpyAlone()
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    rows: int = 6
    micro: int = 4
    updates: int = 2
    flat: bool = False

    @property
    def split_label(self) -> str:
        return f"{self.rows} rows in micro-batches of {self.micro}"

    def with_(self, **changes) -> TokenMeanSpec:
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """The last micro-batch may be short (the uneven cut is the point), but not empty or the only one."""
        if not 0 < self.micro < self.rows:
            raise HarnessConfigError(f"rows={self.rows} not divisible into micro-batches of {self.micro} rows")


@dataclass
class TokenMeanRun:
    """The `harness.instrument.observe.TargetRun` of a toy trainer run."""

    spec: TokenMeanSpec
    flat: bool
    module: types.ModuleType = trainer
    pad_token_id: int = 0
    stop_token_id: int = 1

    def __post_init__(self) -> None:
        generator = torch.Generator().manual_seed(self.spec.seed)
        self.model = torch.nn.Linear(4, 1)
        with torch.no_grad():
            self.model.weight.copy_(torch.randn(1, 4, generator=generator))
        self.params = list(self.model.parameters())
        self.optimizer = torch.optim.SGD(self.params, lr=0.1)
        self.inputs = torch.randn(self.spec.rows, 5, 4, generator=generator)
        lengths = torch.arange(self.spec.rows) % 5 + 1  # ragged: 1 to 5 real tokens a row
        self.masks = (torch.arange(5)[None, :] < lengths[:, None]).float()

    def train(self) -> list[dict[str, float]]:
        return trainer.train(self.model, self.optimizer, self.inputs, self.masks, self.spec.micro,
                             self.spec.updates, self.flat)  # fmt: skip


def reference(spec: TokenMeanSpec) -> TokenMeanRun:
    """The correct trainer."""
    return TokenMeanRun(spec, flat=False)


def broken(spec: TokenMeanSpec) -> TokenMeanRun:
    """The trainer that logs a flat mean of micro-batch means."""
    return TokenMeanRun(spec, flat=True)


def token_mean(cache, run: TokenMeanSpec, case) -> object:
    """Each update's logged `toy/token_mean` is the float64 token mean of every value handed to masked_mean."""
    check = Check(case.id)
    obs = cache.get(run)
    ran = require_ran(obs, check)
    if ran is not None:
        calls = [r for r in ran.record(Spied).records if r.fn == "masked_mean"]
        per_update = -(-run.rows // run.micro)
        if require(check, len(calls) == per_update * run.updates and len(ran.logs) == run.updates,
                   f"{len(calls)} masked_mean calls and {len(ran.logs)} logs for {run.updates} updates"):  # fmt: skip
            for u, logged in enumerate(ran.logs):
                mine = calls[u * per_update : (u + 1) * per_update]
                total = sum(float((c.values.double() * c.mask.double()).sum()) for c in mine)
                count = sum(float(c.mask.double().sum()) for c in mine)
                check.absorb(compare(logged, {METRIC: Expectation(METRIC, total / count)}, run.dtype,
                                     TOLERANCES, where=f"update {u + 1}"))  # fmt: skip
    return check.finish()


@dataclass(frozen=True)
class TokenMeanAlgorithm:
    """The made-up algorithm."""

    name: str = "tokenmean"
    default_target: str = "tokenmean-reference"
    targets: Mapping[str, str] = field(default_factory=lambda: {
        "tokenmean-reference": "tokenmean.algorithm:reference",
        "tokenmean-broken": "tokenmean.algorithm:broken",
    })  # fmt: skip
    targets_with_argument: Mapping[str, str] = field(default_factory=dict)
    instruments: SpyAlone = TokenMeanSpec.instruments
    tolerances: Mapping[str, tuple[tuple[float, ...], ...]] = field(default_factory=lambda: dict(ROWS))
    mutation: Mutation | None = Mutation(
        ("tests/support/third_algorithm/tokenmean/trainer.py",),
        "equivalent_tokenmean.toml",
        "tokenmean",
        id_prefix="t",
        catalogue="tests/support/third_algorithm/mutants",
    )
    """Its curated mutants are in its own folder (mutants/), their classes beside them."""
    contract: Contract = Contract(version=1, document="tests/support/third_algorithm/README.md")
    live: Live | None = Live(names=(("tokenmean_check", "tokenmean.live:check_interval"),), demo="tokenmean.live:main")
    """Its live mode (live.py): `harness.live.tokenmean_check`, and `python -m harness.live --target tokenmean-...`."""
    bench: None = None

    @property
    def scenarios(self) -> Sequence[Scenario]:
        return (Scenario("token_mean", token_mean, summary="the logged token mean is the oracle's"),)

    def run_spec(self, seed: int, device: str, dtype: str, settings: dict | None = None) -> TokenMeanSpec:
        return TokenMeanSpec(seed=seed, device=device, dtype=dtype, **(settings or {}))

    def parse_settings(self, assignments: list[str]) -> dict:
        if assignments:
            raise HarnessConfigError(f"tokenmean takes no --set: {assignments}")
        return {}

    def impossible_spec(self, run_spec: TokenMeanSpec) -> TokenMeanSpec:
        return run_spec.with_(micro=0)

    def rank_specs(self, seed: int) -> Mapping[str, TokenMeanSpec]:
        return {"token_mean": TokenMeanSpec(seed=seed)}

    def for_rank(self, spec: TokenMeanSpec, rank: int, world_size: int) -> TokenMeanSpec:
        return spec

    def rank_checks(self, runs: Mapping[str, Sequence], target=None) -> list:
        return []


TOKENMEAN = TokenMeanAlgorithm()
