"""Definitions a target declares: which of the published definitions of a statistic its trainer implements.

Trainers that are right can define a statistic differently: TRL divides an advantage by its group's std plus 1e-4,
verl by the std plus 1e-6. An algorithm publishes a `Vocabulary` of such choices (each a `Definition`: its name,
what it means, the formula, the values it may take and, for each named profile, the value and the published source
it comes from) and named `profiles` that fix all of them (GRPO: `trl`, the default, and `verl`). A target declares
what its trainer implements on its factory::

    factory.definitions = "verl"                                  # a profile
    factory.definitions = {"advantage_epsilon": 1e-6}             # the default profile, one entry changed
    factory.definitions = {"profile": "verl", "advantage_epsilon": 1e-5}

and the oracle recomputes with the declared values (`Target.definition(name)`). A target that declares nothing is
held to the default profile, exactly the algorithm's contract. An unknown name, profile or value is a
HarnessConfigError of one line (exit 2), naming what is known. The vocabulary of each algorithm is listed in
docs/definitions.md, each entry with its formula and sources.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import HarnessConfigError

PROFILE = "profile"
"""The key of a declaration that names the profile it starts from."""


@dataclass(frozen=True)
class Definition:
    """One choice a trainer's definition of a statistic makes: its name, what it is, the formula it enters, and the
    kind of value it takes (`float`: a finite positive number; else a tuple of the allowed values)."""

    name: str
    summary: str
    formula: str
    kind: type | tuple[Any, ...] = float

    def check(self, value: Any) -> Any:
        """`value` as this definition takes it; HarnessConfigError when it cannot be one."""
        if self.kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
            if not ok:
                raise HarnessConfigError(f"definition {self.name!r} takes a finite positive number, got {value!r}")
            return float(value)
        if value not in self.kind:
            known = ", ".join(map(repr, self.kind))
            raise HarnessConfigError(f"definition {self.name!r} takes one of {known}, got {value!r}")
        return value


@dataclass(frozen=True)
class Profile:
    """A named set of values, one per definition, each with the published source it comes from."""

    name: str
    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Vocabulary:
    """An algorithm's definitions and its profiles; `default` names the profile its contract is."""

    definitions: tuple[Definition, ...] = ()
    profiles: tuple[Profile, ...] = ()
    default: str = ""

    def profile(self, name: str) -> Profile:
        """The profile `name`; HarnessConfigError naming the known ones otherwise."""
        found = next((p for p in self.profiles if p.name == name), None)
        if found is None:
            known = ", ".join(repr(p.name) for p in self.profiles) or "none"
            raise HarnessConfigError(f"no definitions profile {name!r}; known: {known}")
        return found

    def resolve(self, declared: Any) -> tuple[tuple[str, Any], ...]:
        """(name, value) of every definition as `declared` (a profile's name, a dict, or None) fixes it."""
        if not self.definitions:
            if declared is None:
                return ()
            raise HarnessConfigError("its algorithm publishes no definitions to declare")
        if declared is None:
            declared = {}
        elif isinstance(declared, str):
            declared = {PROFILE: declared}
        if not isinstance(declared, Mapping):
            raise HarnessConfigError(f"definitions must be a profile's name or a dict, got {declared!r}")
        values = dict(self.profile(declared.get(PROFILE, self.default)).values)
        by_name = {d.name: d for d in self.definitions}
        for name, value in declared.items():
            if name == PROFILE:
                continue
            if name not in by_name:
                known = ", ".join(by_name)
                raise HarnessConfigError(f"no definition {name!r}; known: {known} (and {PROFILE!r})")
            values[name] = by_name[name].check(value)
        return tuple((d.name, values[d.name]) for d in self.definitions)


def value_of(declared: tuple[tuple[str, Any], ...], name: str, default: Any) -> Any:
    """The declared value of definition `name`, or `default` when the declarations have none (an algorithm with no
    vocabulary, or a target made without resolving)."""
    return next((value for key, value in declared if key == name), default)
