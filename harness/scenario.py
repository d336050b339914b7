"""Scenarios and their cases: a check's id is generated here, once, from its scenario and parameters.

A `Scenario` is a named check function with the axes it is swept over (`epochs=(1, 2)`);
each point of the sweep is a `Case` whose `CheckId` (`uneven_split[epochs=1]`) the report,
the verify suite, the mutant catalogue and the docs all print. An exception inside a check
fails that check with `harness error: ...` and keeps its row in every report; only a
configuration error escapes (the plugin reports that check as one, and the run exits 2).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import HarnessConfigError
from .verdict import CheckId, CheckResult, CheckStatus

CheckFn = Callable[[Any, Any, "Case"], CheckResult]
"""(observation cache, run-wide spec, case) -> the case's result."""


@dataclass(frozen=True)
class Case:
    """One point of a scenario's sweep."""

    scenario: Scenario
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def id(self) -> CheckId:
        """The check id, e.g. `uneven_split[epochs=1]`."""
        return CheckId(self.scenario.name, self.params)

    def param(self, key: str, default: Any = None) -> Any:
        """The value of parameter `key` in this case (`default` when the case has no such parameter)."""
        return dict(self.params).get(key, default)

    def run(self, cache: Any, run_spec: Any) -> CheckResult:
        """The case's result; an exception inside the check fails it (a configuration error is re-raised)."""
        try:
            return self.scenario.check(cache, run_spec, self)
        except HarnessConfigError:
            raise
        except Exception as exc:  # the check's own failure, not a trainer bug: reported, never lost
            why = f"harness error: {type(exc).__name__}: {exc}".splitlines()[0][:500]
            return CheckResult(self.id, CheckStatus.FAIL, problems=(why,))


@dataclass(frozen=True)
class Scenario:
    """A named check and the axes it is swept over; `summary` is its one-line description for the docs."""

    name: str
    check: CheckFn
    axes: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    summary: str = ""
    points: tuple[tuple[tuple[str, Any], ...], ...] = ()
    """Cases listed one by one, after the product of `axes`: a sweep that is not a full product."""

    def cases(self) -> list[Case]:
        """Every point of the sweep, in axis order, then `points` (one case when there are neither)."""
        keys = [key for key, _ in self.axes]
        values = [options for _, options in self.axes]
        product = [] if self.points and not self.axes else itertools.product(*values)
        return [Case(self, tuple(zip(keys, point))) for point in product] + [Case(self, p) for p in self.points]
