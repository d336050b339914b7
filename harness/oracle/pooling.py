"""What the oracle says a metric should be (`Expectation`: a value, or why it has none), and the one correct
pooling behind a pooled value (`Pooled`: per-part sums and counts, kept, and divided once).

An expectation keeps its `Pooled` (one numerator and one count per micro-batch, across
epochs, minibatches and ranks), so that a diagnosis can later re-divide the same sums in
the known wrong ways and see which one reproduces a logged number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .precision import Precision


@dataclass(frozen=True)
class Pooled:
    """Per-part numerators (float64 sums over a mask) and counts (tokens in that mask), in run order."""

    numerators: tuple[float, ...]
    counts: tuple[int, ...]
    magnitudes: tuple[float, ...] = ()
    """Per-part sums of |value| over the mask: the size of what was summed (float rounding scales with it)."""

    @classmethod
    def of(cls, parts: list[tuple[torch.Tensor, torch.Tensor]]) -> Pooled:
        """Pool (values, mask) pairs: the sum of `values` where `mask` holds, and the mask's count, per part."""
        numerators, counts, magnitudes = [], [], []
        for values, mask in parts:
            active = torch.where(mask, values, torch.zeros_like(values))
            numerators.append(float(active.sum()))
            magnitudes.append(float(active.abs().sum()))
            counts.append(int(mask.sum()))
        return cls(tuple(numerators), tuple(counts), tuple(magnitudes))

    @property
    def scale(self) -> float:
        """Mean |value| per token (0 over no token): what a float rounding error of the mean is relative to."""
        return sum(self.magnitudes) / self.count if self.count else 0.0

    @property
    def count(self) -> int:
        """Tokens over every part."""
        return sum(self.counts)

    def token_mean(self) -> float:
        """Sum of numerators over sum of counts; 0 for a mean over no token (never NaN)."""
        count = self.count
        if count == 0:
            return 0.0
        total = torch.tensor(self.numerators, dtype=torch.float64).sum()
        return float(total / count)

    def part_means(self) -> list[float]:
        """The mean of each part that has a token (parts with a zero count add nothing)."""
        return [n / c for n, c in zip(self.numerators, self.counts) if c > 0]

    def variance_scale(self) -> float:
        """sqrt(variance) * mean |part mean|: how far rounding each part mean moves their variance."""
        means = self.part_means()
        if len(means) < 2:
            return 0.0
        return max(self.variance_of_part_means(), 0.0) ** 0.5 * sum(abs(m) for m in means) / len(means)

    def variance_of_part_means(self) -> float:
        """Unbiased (Bessel) variance of the part means; 0.0 with fewer than two parts that have a token."""
        means = self.part_means()
        if len(means) < 2:
            return 0.0
        return float(torch.tensor(means, dtype=torch.float64).var(correction=1))


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
