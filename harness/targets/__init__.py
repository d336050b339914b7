"""Targets: which trainer the gate runs, and for which algorithm.

`resolve("reference")`, `resolve("trl")` (the built-in targets of the registered
algorithms) or `resolve("package.module:factory")` returns a `Target`: the factory
`factory(spec) -> TargetRun` (see `harness.instrument.observe.TargetRun`) and the
algorithm whose scenarios it runs. A factory of your own names its algorithm with an
`algorithm` attribute (default "ppo"). Anything that cannot be resolved is a
HarnessConfigError (exit 2).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from harness.algorithms import DEFAULT_ALGORITHM, builtin_targets, known_algorithms
from harness.errors import HarnessConfigError


@dataclass(frozen=True)
class Target:
    """A resolved target: its name as given, its algorithm, its factory."""

    name: str
    algorithm: str
    factory: Callable


def _load(name: str, path: str) -> Callable:
    """The callable at `module:attr`, or a HarnessConfigError saying why not."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HarnessConfigError(f"target {name!r}: cannot import {module_name!r} ({exc})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise HarnessConfigError(f"target {name!r}: {module_name!r} has no callable {attr!r}")
    return factory


def _takes_one_spec(factory: Callable) -> bool:
    """True when `factory` can be called with one positional argument (the spec)."""
    try:
        inspect.signature(factory).bind(object())
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): let the call decide
        return True
    return True


def resolve(name: str) -> Target:
    """The target named `name`; HarnessConfigError (exit 2) when it cannot be found or is not a factory."""
    builtin = builtin_targets()
    if name in builtin:
        algorithm, path = builtin[name]
    elif ":" in name:
        algorithm, path = None, name
    else:
        known = ", ".join(sorted(builtin))
        raise HarnessConfigError(f"unknown target {name!r}: use one of {known} or 'package.module:factory'")
    factory = _load(name, path)
    if not _takes_one_spec(factory):
        raise HarnessConfigError(f"target {name!r}: the factory must take one argument, the scenario spec")
    algorithm = algorithm or getattr(factory, "algorithm", DEFAULT_ALGORITHM)
    if algorithm not in known_algorithms():
        raise HarnessConfigError(
            f"target {name!r} names algorithm {algorithm!r}; known: {', '.join(sorted(known_algorithms()))}"
        )
    return Target(name, algorithm, factory)
