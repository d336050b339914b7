"""Each expensive thing once per test session (per pytest-xdist worker): a target's observations, a whole gate.

A test that reads a run of a target asks `observations(factory)` for the one `ObservationCache` of that
factory, so a scenario several modules read (the GRPO reference's uneven-lengths run, the PPO reference's
uneven split) trains once. A test about the gate's verdict on a target, not about the command line, asks
`gate(...)`: the run `python -m harness verify` makes (the engine's `run_gate`, harness/engine.py, against one
cache, into one `Report`), in this process and once per argument set; the subprocess stays with the tests of
the command line itself (`tests/support/gate_run.py`: exit codes, `--seeds`, the terminal lines, module targets).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable

from harness.instrument.observe import ObservationCache


@functools.cache
def observations(factory: Callable) -> ObservationCache:
    """The session's one observation cache of `factory` (a target's factory or a test's broken variant)."""
    return ObservationCache(factory)


def declaring(cache: ObservationCache, target) -> ObservationCache:
    """`cache`'s observations, shared, in a cache whose checks read the declarations of `target` (a resolved
    `harness.targets.Target`), as `python -m harness verify`'s do."""
    twin = copy.copy(cache)
    twin.target = target
    return twin


def reference(algorithm: str = "ppo") -> ObservationCache:
    """The session's cache of the reference trainer of `algorithm` (`ppo` or `grpo`)."""
    if algorithm == "grpo":
        from harness.algorithms.grpo.targets.reference import factory
    else:
        from harness.algorithms.ppo.targets.reference import factory
    return observations(factory)


@functools.cache
def _gate(target: str, seed: int, dtype: str, settings: tuple[str, ...], checks: tuple[str, ...]) -> str:
    from harness.engine import GateOptions, run_gate
    from harness.targets import resolve

    resolved = resolve(target)
    # the default run's observations are the ones other tests read; another seed's, dtype's or setting's are
    # this gate's alone, and go when it is done
    shared = (seed, dtype, settings) == (0, "float32", ())
    cache = declaring(observations(resolved.factory) if shared else ObservationCache(resolved.factory), resolved)
    options = GateOptions(target=target, seed=seed, dtype=dtype, settings=settings, checks=checks)
    return run_gate(options, cache=cache).to_json()


def gate(
    target: str = "reference",
    *,
    seed: int = 0,
    dtype: str = "float32",
    settings: tuple[str, ...] = (),
    checks: tuple[str, ...] = (),
) -> dict:
    """verify.json's data for `python -m harness verify --target TARGET --seed SEED --dtype DTYPE --set ...
    --check ...` on the CPU, run in this process once per argument set (each call gets its own copy)."""
    return json.loads(_gate(target, seed, dtype, tuple(settings), tuple(checks)))
