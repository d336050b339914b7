"""Targets: which trainer the gate runs, and for which algorithm.

`resolve("reference")`, `resolve("trl")` (the built-in targets of the registered
algorithms), `resolve("trl:my_pkg.ppo_trainer")` (a built-in target given an argument:
TRL's adapter on another module) or `resolve("package.module:factory")` returns a
`Target`: the factory `factory(spec) -> TargetRun` (see
`harness.instrument.observe.TargetRun`) and the algorithm whose scenarios it runs. A name
before the colon that is a built-in target taking an argument wins over a module of
that name. A factory of your own names its algorithm with an `algorithm` attribute
(`factory.algorithm = "ppo"`, or "grpo"): the algorithm is never guessed, and a factory that
names none is a HarnessConfigError. A factory may also declare, with an `optional_metrics` attribute
(`factory.optional_metrics = ("policy_loss",)`), the metrics its trainer logs that the algorithm's contract
makes optional: the gate then holds it to logging them (`declared_metrics`); and, with `contract_version`
(`factory.contract_version = 2`), the version of its algorithm's contract it was written for: a failing check
that a later change touches then names that change (harness/contract.py). Anything that cannot be resolved
is a HarnessConfigError (exit 2); whether the run it builds fits that algorithm is checked by `harness.preflight`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from harness.algorithms import builtin_targets, builtin_targets_with_argument, known_algorithms
from harness.errors import HarnessConfigError


@dataclass(frozen=True)
class Target:
    """A resolved target: its name as given, its algorithm, its factory, the contract version it pins (or None)."""

    name: str
    algorithm: str
    factory: Callable
    contract_version: int | None = None


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


OPTIONAL_METRICS = "optional_metrics"
"""The factory attribute naming the contract's optional metrics its trainer logs (a tuple of names)."""


def declared_metrics(factory: Callable) -> tuple[str, ...]:
    """The optional metrics `factory` declares its trainer logs (`factory.optional_metrics`), () when it declares
    none; HarnessConfigError when the attribute is not a list or tuple of names."""
    declared = getattr(factory, OPTIONAL_METRICS, ())
    if not isinstance(declared, (list, tuple)) or not all(isinstance(n, str) for n in declared):
        raise HarnessConfigError(f"`{OPTIONAL_METRICS}` of the factory must be a tuple of metric names, "
                                 f"got {declared!r}")  # fmt: skip
    return tuple(declared)


def declare_hint(name: str, *algorithms: str) -> str:
    """How a factory names its algorithm: one of `algorithms` (none given: every registered one, the default first)."""
    names = list(algorithms) or known_algorithms()
    attr = name.partition(":")[2] or "factory"
    others = " or ".join(f'"{n}"' for n in names[1:])
    return f'set `{attr}.algorithm = "{names[0]}"` on the factory' + (f" (or {others})" if others else "")


def resolve(name: str) -> Target:
    """The target named `name`; HarnessConfigError (exit 2) when it cannot be found or is not a factory."""
    builtin = builtin_targets()
    with_argument = builtin_targets_with_argument()
    prefix, colon, argument = name.partition(":")
    if name in builtin:
        algorithm, path = builtin[name]
        factory = _load(name, path)
    elif colon and prefix in with_argument:
        algorithm, path = with_argument[prefix]
        if not argument.strip():
            raise HarnessConfigError(f"target {name!r}: name a module after {prefix + ':'!r}, e.g. {prefix}:my_pkg.mod")
        factory = _load(name, path)(argument.strip())
    elif colon:
        algorithm, factory = None, _load(name, name)
    else:
        known = ", ".join([*sorted(builtin), *(f"{n}:MODULE" for n in sorted(with_argument))])
        raise HarnessConfigError(f"unknown target {name!r}: use one of {known} or 'package.module:factory'")
    if not _takes_one_spec(factory):
        raise HarnessConfigError(f"target {name!r}: the factory must take one argument, the scenario spec")
    if algorithm is None:
        algorithm = getattr(factory, "algorithm", None)
        if algorithm is None:
            raise HarnessConfigError(f"target {name!r} names no algorithm: {declare_hint(name)}")
    if algorithm not in known_algorithms():
        raise HarnessConfigError(
            f"target {name!r} names algorithm {algorithm!r}; known: {', '.join(sorted(known_algorithms()))}"
        )
    try:
        declared_metrics(factory)
    except HarnessConfigError as exc:
        raise HarnessConfigError(f"target {name!r}: {exc}") from None
    pinned = pinned_contract(factory, algorithm, name)
    if pinned is None and (name in builtin or (colon and prefix in with_argument)):
        from harness.algorithms import get

        pinned = get(algorithm).contract.version  # a built-in target ships with the gate: written for its contract
    return Target(name, algorithm, factory, pinned)


def pinned_contract(factory: Callable, algorithm: str, name: str = "factory") -> int | None:
    """The contract version `factory` says it was written for (`factory.contract_version`), None when it says none;
    HarnessConfigError when it is not a version of `algorithm`'s contract (harness/contract.py)."""
    from harness.algorithms import get
    from harness.contract import CONTRACT_VERSION

    try:
        return get(algorithm).contract.check_pin(getattr(factory, CONTRACT_VERSION, None), name)
    except ValueError as exc:
        raise HarnessConfigError(str(exc)) from None
