"""Loss records -> a view of each logging interval: its records, their token terms and its expectations, built
once per observation however many checks read them (as PPO's view is).

The stage between the records a GRPO run kept (`GRPORecords.loss_inputs`, its `Ran.payload`) and the
checks: the records' problems are found once, the records are cut into the run's logging intervals once (by their
window), and each interval computes its token terms (expect.py) and its expected metrics the first
time a check asks, then keeps them; the diagnosis of a failing metric (poolings.py) reads the same terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from harness.instrument.loss import LossRecord
from harness.instrument.observe import Observation
from harness.oracle.pooling import Expectation

from .contract import pooled_names
from .definitions import IN_THE_SETTINGS, VOCABULARY
from .instruments import recorded
from .oracle.expect import Settings, TokenTerms, expected_from_terms, intervals, terms_of
from .oracle.records import record_problems, unusable


@dataclass(frozen=True, eq=False)
class IntervalView:
    """One logging interval: its loss records in the order they ran, and what the oracle makes of them."""

    index: int
    records: tuple[LossRecord, ...]
    settings: Settings
    problems: tuple[str, ...] = ()
    """What is wrong with its records (record_problems), in their order."""

    @property
    def unusable(self) -> str:
        """Why its records determine none of its metrics, or ''."""
        return unusable(self.records, self.problems)

    @cached_property
    def terms(self) -> tuple[TokenTerms, ...]:
        """The token terms of each record (empty when the records are unusable)."""
        return () if self.unusable else tuple(terms_of(self.records, self.settings))

    @cached_property
    def expected(self) -> dict[str, Expectation]:
        """Every metric its records determine (each without a value, saying why, when they are unusable)."""
        why = self.unusable
        if why:
            return {n: Expectation.unknown(n, why) for n in pooled_names(self.settings.beta, self.settings.loss_type)}
        return expected_from_terms(self.terms, self.settings)

    def token_counts(self) -> list[int]:
        """The completion tokens of each micro-batch."""
        return [int(r.completion_mask.sum()) for r in self.records]


@dataclass(frozen=True, eq=False)
class RunView:
    """A run's loss records, what is wrong with each, and its logging intervals."""

    records: tuple[LossRecord, ...]
    problems: tuple[tuple[int, str], ...]
    """(record number, problem) of every problem of every record."""
    intervals: tuple[IntervalView, ...]


def build_view(records: Sequence[LossRecord], spec: Any, definitions: Sequence[tuple[str, Any]] = ()) -> RunView:
    """The view of a run's loss records under `spec` (its settings and its logging intervals), its loss as the
    target's `definitions` fix it."""
    settings = Settings.of(spec, definitions)
    found = {id(r): tuple(record_problems(r)) for r in records}
    problems = tuple((i, p) for i, r in enumerate(records) for p in found[id(r)])
    cut = intervals(records, spec)
    views = tuple(IntervalView(i, tuple(rs), settings, tuple(p for r in rs for p in found[id(r)]))
                  for i, rs in enumerate(cut))  # fmt: skip
    return RunView(tuple(records), problems, views)


def view_of(obs: Observation, definitions: Sequence[tuple[str, Any]] = ()) -> RunView:
    """The view of a finished observation's loss records under the target's `definitions`, built once however many
    checks read it (one for each set of the entries its settings carry: those off the default profile name it)."""
    default = VOCABULARY.profile(VOCABULARY.default).values
    declared = tuple((name, value) for name, value in definitions if name in IN_THE_SETTINGS and value != default[name])
    name = "grpo" + "".join(f" {key}={value!r}" for key, value in declared)
    return obs.view(name, lambda ran: build_view(recorded(ran).loss_inputs or (), obs.spec, declared))
