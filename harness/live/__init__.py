"""Live mode: the gate's instruments on a user's own training run, checking a sample of its logging intervals
while it trains (docs/live.md).

- `LiveCheck`: a transformers `TrainerCallback` for TRL's `GRPOTrainer` (`trainer.add_callback(LiveCheck(every=20))`);
- `live_reference`: a context manager around the reference GRPO trainer (reference_trainers/grpo.py) or a loop
  with its names;
- `LiveSession`, `check_interval`: the sampling, the check of one interval, and its reports, trainer-neutral.

TRL and transformers are imported only by `LiveCheck`'s module (`harness.live.targets.trl`); the modules that hold
a trainer (TRL's, the reference, the demonstration's) live in `targets/`, as the gate's do, and the check of an
interval is GRPO's (`harness/algorithms/grpo/live.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.algorithms.grpo.live import IntervalResult, Summary, check_interval, expected_key, merge_ranks

    from .session import LiveCheckFailed, LiveConfigError, LiveSession

__all__ = ["IntervalResult", "LiveCheck", "LiveCheckFailed", "LiveConfigError", "LiveSession", "Summary",
           "check_interval", "expected_key", "live_reference", "merge_ranks"]  # fmt: skip


GRPO_NAMES = ("IntervalResult", "Summary", "check_interval", "expected_key", "merge_ranks")
"""The names of the check of an interval, GRPO's (harness/algorithms/grpo/live.py)."""
SESSION_NAMES = ("LiveCheckFailed", "LiveConfigError", "LiveSession")
"""The names of the sampling and the reports (harness/live/session.py)."""


def __getattr__(name: str) -> Any:
    """Each public name, imported when first asked for: importing the package imports nothing else (not even torch),
    so that `python -m harness.live` without a module it needs says so in one line (harness/needs.py) rather than
    failing on the package's import; and the check itself never imports a trainer's adapter."""
    if name == "LiveCheck":
        from .targets.trl import LiveCheck

        return LiveCheck
    if name == "live_reference":
        from .targets.reference import live_reference

        return live_reference
    if name in GRPO_NAMES:
        from harness.algorithms.grpo import live

        return getattr(live, name)
    if name in SESSION_NAMES:
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
