"""What a trainer logs, read where its users read it: its callbacks and accelerate's trackers.

A reference target hands the gate the metrics its trainer *logged*, not the list that `train()`
returns: a trainer whose callbacks or trackers get other numbers, another step, or nothing, is
wrong for its users however right its return value. `LogTap` listens on both channels. Its
`logged` raises `LoggedWrong` (a trainer failure: every check of the run then fails, naming it)
when

- the callback saw the updates at other steps than the trainer's own schedule (`steps`);
- accelerate's trackers (main process) got other steps or numbers than the callbacks;
- `train()` returned other numbers than it logged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


class LoggedWrong(RuntimeError):
    """The trainer's logging channels disagree with each other or with its schedule."""


def _same(a: Mapping, b: Mapping) -> bool:
    """Equal metric dicts, NaN equal to NaN (a NaN metric is the NaN checks' business, not a logging mismatch)."""
    if a.keys() != b.keys():
        return False
    for key, x in a.items():
        y = b[key]
        both_nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
        if not (both_nan or x == y):
            return False
    return True


def _first_difference(a: Sequence[tuple[int, dict]], b: Sequence[tuple[int, dict]]) -> str:
    """Where two logs of (step, metrics) part, on one line."""
    if len(a) != len(b):
        return f"{len(a)} entries against {len(b)}"
    for (step_a, m_a), (step_b, m_b) in zip(a, b):
        if step_a != step_b:
            return f"step {step_a} against {step_b}"
        if not _same(m_a, m_b):
            keys = sorted(set(m_a) ^ set(m_b)) or [k for k in sorted(m_a) if not _same({k: m_a[k]}, {k: m_b[k]})]
            return f"at step {step_a}, {', '.join(map(str, keys[:4]))} differ"
    return "no difference"


class LogTap:
    """A callback for the trainer and a tracker for its accelerator that record every (step, metrics)."""

    def __init__(self) -> None:
        self.called: list[tuple[int, dict]] = []
        self.tracked: list[tuple[int, dict]] = []
        self.tracking = False

    def callback(self, metrics: Mapping, step: int) -> None:
        """The trainer's callback: `callback(metrics, step)` after each logged update."""
        self.called.append((step, dict(metrics)))

    def attach(self, accelerator) -> None:
        """Add a recording tracker to `accelerator`'s trackers (accelerate logs on the main process only)."""
        from accelerate.tracking import GeneralTracker

        sink = self.tracked

        class Recording(GeneralTracker):
            name = "ppo-stats-harness"
            requires_logging_directory = False

            @property
            def tracker(self):
                return sink

            def log(self, values: dict, step: int | None = None, **kwargs) -> None:
                sink.append((step, dict(values)))

        accelerator.trackers.append(Recording())
        self.tracking = bool(accelerator.is_main_process)

    def logged(self, returned: Sequence[Mapping], steps: Sequence[int]) -> list[dict]:
        """The metrics as the callbacks got them, once they agree with `steps`, the trackers and `returned`."""
        got = [step for step, _ in self.called]
        if got != list(steps):
            raise LoggedWrong(f"the trainer's callbacks got steps {got}; its schedule logs at {list(steps)}")
        if self.tracking and not (
            [s for s, _ in self.tracked] == got
            and all(_same(a, b) for (_, a), (_, b) in zip(self.tracked, self.called))
        ):
            where = _first_difference(self.tracked, self.called)
            raise LoggedWrong(f"accelerate's trackers and the callbacks were logged different things: {where}")
        called = [metrics for _, metrics in self.called]
        if len(returned) != len(called) or not all(_same(a, b) for a, b in zip(returned, called)):
            where = _first_difference(list(enumerate(returned)), list(enumerate(called)))
            raise LoggedWrong(f"train() returned other metrics than the trainer logged: {where}")
        return called
