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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.algorithms.grpo.live import IntervalResult, Summary, check_interval, expected_key, merge_ranks

    from .session import LiveCheckFailed, LiveConfigError, LiveSession

__all__ = ["IntervalResult", "LiveCheck", "LiveCheckFailed", "LiveConfigError", "LiveSession", "Summary",
           "check_interval", "expected_key", "live_reference", "merge_ranks"]  # fmt: skip


ADAPTERS = {"LiveCheck": "harness.live.targets.trl", "live_reference": "harness.live.targets.reference"}
"""Name -> the `targets/` module that defines it, loaded by name when first asked for (as the target resolver
loads the gate's targets): the check itself never imports a trainer's adapter."""
EXPORTS = {
    **dict.fromkeys(("IntervalResult", "Summary", "check_interval", "expected_key", "merge_ranks"),
                    "harness.algorithms.grpo.live"),
    **dict.fromkeys(("LiveCheckFailed", "LiveConfigError", "LiveSession"), "harness.live.session"),
    **ADAPTERS,
}  # fmt: skip
"""Every public name -> its module, each imported when first asked for: importing the package imports nothing
else (not even torch), so that `python -m harness.live` without a module it needs says so in one line
(harness/needs.py) rather than failing on the package's import."""


def __getattr__(name: str) -> Any:
    if name in EXPORTS:
        return getattr(importlib.import_module(EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
