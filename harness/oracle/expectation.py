"""What the oracle says a metric should be: a value, or why it has none."""

from __future__ import annotations

from dataclasses import dataclass

from .pooling import Pooled
from .precision import Precision


@dataclass(frozen=True)
class Expectation:
    """The expected value of one metric, or the reason the records do not determine it (`value is None`).

    `required=False` marks a metric left out by the caller's choice (no scores supplied),
    which is reported without failing. `pooled` keeps the sums and counts behind a pooled
    value; `count` is the number of tokens, samples or parts it rests on.
    """

    metric: str
    value: float | None
    reason: str | None = None
    count: int | None = None
    required: bool = True
    pooled: Pooled | None = None
    scale: float | None = None
    """The size of the terms the value is made of (e.g. mean |per-token value|). A float rounding error of a
    mean scales with its terms, not with the mean, which can be near 0 (a loss over whitened advantages)."""
    precision: Precision | None = None
    """The arithmetic behind the value (the dtype the trainer held its terms in, how many, how large): where
    given, the comparison's tolerance is derived from it instead of read from the table (precision.py)."""

    @property
    def recomputable(self) -> bool:
        """True when the oracle has a value."""
        return self.value is not None

    @classmethod
    def unknown(cls, metric: str, reason: str, required: bool = True) -> Expectation:
        """An expectation without a value, saying why."""
        return cls(metric, None, reason, required=required)
