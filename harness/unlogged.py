"""The contract's metrics a target declares its trainer does not log (`factory.unlogged_metrics`, read once into
`Target.unlogged_metrics`, harness/targets).

A check that compares logged metrics leaves them out of its comparison (`leave_out`), says so in one note, and
still compares every other; one the trainer logs anyway fails the check, named, so that a wrong declaration hides
no number; a check whose every metric is left out compared nothing and is not applicable (`Check.not_applicable`),
never passed. Nothing here names an algorithm.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from harness.verdict import Check

UNLOGGED_METRICS = "unlogged_metrics"
"""The factory attribute naming the contract's metrics its trainer does not log (a tuple of names or patterns)."""


def declared_unlogged(cache: Any) -> tuple[str, ...]:
    """The metrics the cache's target declares its trainer does not log, () for none or for a cache of a bare
    factory."""
    target = getattr(cache, "target", None)
    return tuple(target.unlogged_metrics) if target is not None else ()


def unlogged(names: Sequence[str], declares: Sequence[str]) -> list[str]:
    """Those of `names` a declared name or pattern (`rewards/*/mean`, fnmatch's) stands for, in their order."""
    return [n for n in names if any(n == d or fnmatch.fnmatchcase(n, d) for d in declares)]


def leave_out(check: Check, logs: Sequence[Mapping[str, object]], names: Sequence[str], declares: Sequence[str],
              where: str = "") -> tuple[str, ...]:  # fmt: skip
    """`names` less those `declares` says the trainer does not log, which one note names; one that some of `logs`
    holds fails the check, named, and stays among the names compared. When none is left, the check is told it has
    nothing to compare (`Check.not_applicable`). `where` names the run(s) the logs come from."""
    out = unlogged(names, declares)
    if not out:
        return tuple(names)
    logged = [n for n in out if any(n in log for log in logs)]
    if logged:
        check.fail(f"{', '.join(logged)} declared in {UNLOGGED_METRICS} but logged ({where or 'the run'}): compare "
                   f"{'it' if len(logged) == 1 else 'them'} by removing {'it' if len(logged) == 1 else 'them'} from "
                   f"the declaration")  # fmt: skip
    left = [n for n in out if n not in logged]
    if left:
        said = f"not logged, as the target declares ({UNLOGGED_METRICS}): {', '.join(left)}"
        if said not in check.notes:
            check.note(said)
    kept = tuple(n for n in names if n not in left)
    if not kept:
        check.not_applicable(said)
    return kept
