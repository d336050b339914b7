"""The bench's sizes: which target, which run (the algorithm's spec) and which model shape each one measures.

The sizes are an algorithm's, declared by its `bench` member (`harness.algorithms.Bench`; PPO's are
harness/algorithms/ppo/bench.py): `algorithm_bench()` finds the one algorithm that declares them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .shapes import ModelShape


@dataclass(frozen=True)
class Size:
    """One bench size: the target that builds its runs, the run, the default number of timed pairs."""

    name: str
    target: str
    """A name for `harness.targets.resolve`: a built-in target or `module:factory`."""
    spec: Any
    """The run: the algorithm's spec (`with_(...)` sets its device, dtype and seed)."""
    repeat: int
    """Timed (bare, spied+checked) pairs by default: enough for a median, few enough for the time goal."""
    shape: ModelShape | None = None
    """The model shape, for the bench's own target (None: the toy world's two-layer model)."""
    meant_for: str = "cpu"
    warmup: int = 1
    """Untimed spied runs before the profiled one (the profiled run is untimed too)."""


def declared(member: str) -> Any:
    """What the first registered algorithm whose `bench` declares `member` (`sizes`, `oracle`, `live_run`) names,
    loaded (HarnessConfigError when none does)."""
    from harness import algorithms
    from harness.errors import HarnessConfigError

    for name in algorithms.known_algorithms():
        bench = algorithms.get(name).bench
        if bench is not None and getattr(bench, member) is not None:
            return bench.load(member)
    raise HarnessConfigError(f"python -m harness.bench: no registered algorithm declares a bench {member}")
