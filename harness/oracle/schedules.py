"""A learning-rate schedule recomputed in float64: the rate each optimizer step must use.

A schedule is declared by the run (its kind, the base rate, the warm-up steps and the steps trained), never read
from the trainer's scheduler. Step k (0-based: the k-th `optimizer.step()` of the run) uses

    rate(k) = base * factor(k)

with the factors of the schedules users name in their configs, as transformers' `get_scheduler` defines them
(transformers.optimization, the `_get_*_lr_lambda` functions; W the warm-up steps, T the steps trained):

    constant               1
    constant_with_warmup   k / max(1, W) while k < W, then 1
    linear                 k / max(1, W) while k < W, then max(0, (T - k) / max(1, T - W))
    cosine                 k / max(1, W) while k < W, then max(0, (1 + cos(pi p)) / 2), p = (k - W) / max(1, T - W)

(cosine with transformers' default half cycle). The rate after the run's k-th step, the one a trainer that logs
its optimizer's rate once the scheduler has stepped shows (transformers' Trainer logs `_get_learning_rate()`
after it), is rate(k) as well: the scheduler has then stepped k times. Nothing here imports a trainer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.errors import HarnessConfigError

KINDS = ("constant", "constant_with_warmup", "linear", "cosine")
"""The schedules the oracle recomputes."""


def _factor(kind: str, k: int, warmup: int, total: int) -> float:
    if kind == "constant":
        return 1.0
    if k < warmup:
        return k / max(1, warmup)
    if kind == "constant_with_warmup":
        return 1.0
    progress = (k - warmup) / max(1, total - warmup)
    if kind == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


@dataclass(frozen=True)
class Schedule:
    """A declared learning-rate schedule: `kind` (KINDS), the base rate, warm-up steps and the steps trained."""

    kind: str
    base: float
    warmup: int
    total: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise HarnessConfigError(f"lr_scheduler_type={self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.warmup < 0 or self.total <= 0 or not self.base >= 0:
            raise HarnessConfigError(f"a schedule needs warmup_steps >= 0, steps > 0 and a rate >= 0, got "
                                     f"{self.warmup}, {self.total}, {self.base}")  # fmt: skip

    def rate(self, k: int) -> float:
        """The rate of the run's step k (0-based), in float64; also the rate after k steps."""
        return self.base * _factor(self.kind, k, self.warmup, self.total)

    @property
    def label(self) -> str:
        """`linear (base 0.001, warm-up 2, 6 steps)`: the schedule, as failure lines name it."""
        return f"{self.kind} (base {self.base:g}, warm-up {self.warmup}, {self.total} steps)"
