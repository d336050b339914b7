"""Live mode: the gate's instruments on a user's own training run, checking a sample of its logging intervals
while it trains (docs/live.md).

- `LiveSession`: the sampling, the gathering of every rank's records, and the reports, whatever the algorithm;
- `IntervalResult`, `Summary`, `expected_key`: what it reports of a checked interval and of the run;
- every other public name (GRPO's `LiveCheck`, `live_reference`, `check_interval`, `merge_ranks`) is an algorithm's,
  found through the registry: the `live` member of each registered algorithm (`harness.algorithms.Live`) names
  its adapters and its check of an interval, loaded when first asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IntervalResult", "LiveCheck", "LiveCheckFailed", "LiveConfigError", "LiveSession", "Summary",
           "check_interval", "expected_key", "live_reference", "merge_ranks"]  # fmt: skip


INTERVAL_NAMES = ("IntervalResult", "Summary", "expected_key")
"""The names of what is reported of an interval (harness/live/interval.py)."""
SESSION_NAMES = ("LiveCheckFailed", "LiveConfigError", "LiveSession")
"""The names of the sampling and the reports (harness/live/session.py)."""


def __getattr__(name: str) -> Any:
    """Each public name, imported when first asked for: importing the package imports nothing else (not even torch),
    so that `python -m harness.live` without a module it needs says so in one line (harness/needs.py) rather than
    failing on the package's import. A name not of live mode's own is the first registered algorithm's whose live
    mode gives it."""
    if name in INTERVAL_NAMES:
        from . import interval

        return getattr(interval, name)
    if name in SESSION_NAMES:
        from . import session

        return getattr(session, name)
    if not name.startswith("__"):
        from harness import algorithms

        for algorithm in algorithms.with_live():
            live = algorithms.get(algorithm).live
            if name in dict(live.names):
                return live.load(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
