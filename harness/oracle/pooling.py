"""The one correct pooling: per-part sums and counts, kept, and divided once.

An expectation keeps its `Pooled` (one numerator and one count per micro-batch, across
epochs, minibatches and ranks), so that a diagnosis can later re-divide the same sums in
the known wrong ways and see which one reproduces a logged number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
