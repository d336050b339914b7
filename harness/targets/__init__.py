"""Targets: adapters that build and run a trainer for a scenario.

A target is a callable `factory(spec: ScenarioSpec) -> TargetRun` (see
docs/architecture.md). `resolve("reference")`, `resolve("trl")` or
`resolve("package.module:factory")` returns one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..errors import HarnessConfigError

BUILTIN = {
    "reference": "harness.targets.reference:factory",
    "trl": "harness.targets.trl:factory",
}


def resolve(name: str) -> Callable:
    """The factory named by `name`; HarnessConfigError (exit 2) when it cannot be found."""
    path = BUILTIN.get(name, name)
    if ":" not in path:
        known = ", ".join(sorted(BUILTIN))
        raise HarnessConfigError(f"unknown target {name!r}: use one of {known} or 'package.module:factory'")
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HarnessConfigError(f"target {name!r}: cannot import {module_name!r} ({exc})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise HarnessConfigError(f"target {name!r}: {module_name!r} has no callable {attr!r}")
    return factory
