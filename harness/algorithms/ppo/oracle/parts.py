"""What each micro-batch contributes to a pooled PPO statistic, the correct way and the known wrong ways (poolings.py
pools them): a value and a weight each, from the micro-batch's view alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..contract import PooledMean
from ..view import MicroBatchView
from .expect import _OF_LOG_RATIO, per_token

Part = tuple[float, float]
"""(value, weight) of one micro-batch: the pooled number is sum(values) / sum(weights); its mean value / weight."""


def _masked(values: torch.Tensor, mask: torch.Tensor) -> tuple[float, int]:
    return float(torch.where(mask, values, torch.zeros_like(values)).sum()), int(mask.sum())


def correct(metric: PooledMean, micro: MicroBatchView) -> Part:
    return _masked(per_token(metric, micro), micro.mask(metric.mask))


def _sentinel_values(metric: PooledMean, micro: MicroBatchView) -> torch.Tensor:
    """Per-token values when both log-probs hold one sentinel at every position outside R (log-ratio 0 there)."""
    log_ratio = torch.where(micro.response_mask, micro.log_ratio(), torch.zeros_like(micro.record.logprobs))
    return _OF_LOG_RATIO[metric.of_log_ratio](log_ratio)


def _plain(values: torch.Tensor) -> float:
    return float(values.double().mean()) if values.numel() else 0.0


def pads_weighted(metric: PooledMean, micro: MicroBatchView) -> Part:
    count = int(micro.mask(metric.mask).sum())
    return _plain(per_token(metric, micro)) * count, count


def pads_pooled(metric: PooledMean, micro: MicroBatchView) -> Part:
    values = per_token(metric, micro)
    return float(values.sum()), values.numel()


def sentinel_weighted(metric: PooledMean, micro: MicroBatchView) -> Part:
    count = int(micro.mask(metric.mask).sum())
    return _plain(_sentinel_values(metric, micro)) * count, count


def sentinel_pooled(metric: PooledMean, micro: MicroBatchView) -> Part:
    values = _sentinel_values(metric, micro)
    return float(values.sum()), values.numel()


def response_mask(metric: PooledMean, micro: MicroBatchView) -> Part:
    return _masked(per_token(metric, micro), micro.response_mask)


def value_means_response_weighted(metric: PooledMean, micro: MicroBatchView) -> Part:
    total, count = correct(metric, micro)
    r_count = int(micro.response_mask.sum())
    return (total / count if count else 0.0) * r_count, r_count


def _shifted(metric: PooledMean, micro: MicroBatchView, by: int) -> Part:
    values, mask = per_token(metric, micro), micro.response_mask
    count = int(mask.sum())
    if by > 0:  # position t takes the value of t + 1
        return _masked(values[:, 1:], mask[:, :-1])[0], count
    return _masked(values[:, :-1], mask[:, 1:])[0], count


def rows_over_tokens(metric: PooledMean, micro: MicroBatchView) -> Part:
    total, count = correct(metric, micro)
    return (total / count if count else 0.0) * micro.rows, count


def empty_as_one(metric: PooledMean, micro: MicroBatchView) -> Part:
    total, count = correct(metric, micro)
    return total, max(count, 1)


def rows_over_rows(metric: PooledMean, micro: MicroBatchView) -> Part:
    total, count = correct(metric, micro)
    return (total / count if count else 0.0) * micro.rows, micro.rows


@dataclass(frozen=True)
class PartRule:
    """One way a micro-batch's contribution is made: classes, what a part is, what pooling it alone logs."""

    classes: tuple[int, ...]
    part: str
    alone: str
    applies: Callable[[PooledMean], bool]
    make: Callable[[PooledMean, MicroBatchView], Part]
    source: str


def _log_ratio_or_entropy(m: PooledMean) -> bool:
    return m.source in ("log_ratio", "entropy")


def _value_stat(m: PooledMean) -> bool:
    return m.mask == "V"


PARTS: tuple[PartRule, ...] = (
    PartRule((), "per-micro-batch token means", "token mean", lambda m: True, correct, "Pooled sums and counts"),
    PartRule((5,), "per-micro-batch plain means over every position (pads included)",
             "per-micro-batch plain means over every position (pads included), weighted by their token counts",
             _log_ratio_or_entropy, pads_weighted, "view: per-position values before masking"),
    PartRule((5,), "plain means over every position (pads included)",
             "plain mean over every position of every micro-batch (pads included)",
             _log_ratio_or_entropy, pads_pooled, "view: per-position values before masking"),
    PartRule((5,), "per-micro-batch plain means over every position, pads at log-ratio 0 (sentinel log-probs)",
             "per-micro-batch plain means over every position, pads at log-ratio 0, weighted by their token counts",
             lambda m: m.source == "log_ratio", sentinel_weighted, "view: log-ratio, 0 outside R"),
    PartRule((5,), "plain means over every position, pads at log-ratio 0 (sentinel log-probs)",
             "plain mean over every position, pads at log-ratio 0 (sentinel log-probs)",
             lambda m: m.source == "log_ratio", sentinel_pooled, "view: log-ratio, 0 outside R"),
    PartRule((6,), "per-micro-batch means over R (not V)", "token mean over the response mask R, not V",
             _value_stat, response_mask, "view: site values under R"),
    PartRule((6,), "per-micro-batch V means weighted by R tokens", "per-micro-batch V means weighted by R tokens",
             _value_stat, value_means_response_weighted, "Pooled sums and counts; view: R counts"),
    PartRule((4,), "entropy one position late", "entropy summed over R one position late (t + 1), / |R|",
             lambda m: m.source == "entropy", lambda m, mb: _shifted(m, mb, 1), "view: entropy at every position"),
    PartRule((4,), "entropy one position early", "entropy summed over R one position early (t - 1), / |R|",
             lambda m: m.source == "entropy", lambda m, mb: _shifted(m, mb, -1), "view: entropy at every position"),
    PartRule((3,), "per-micro-batch means weighted by rows", "per-micro-batch means weighted by rows, / tokens",
             lambda m: m.source == "pg_loss", rows_over_tokens, "Pooled sums and counts; view: rows"),
    PartRule((3,), "per-micro-batch means weighted by rows", "per-micro-batch means weighted by rows (samples)",
             lambda m: m.source == "pg_loss", rows_over_rows, "Pooled sums and counts; view: rows"),
    PartRule((12,), "per-micro-batch token means, an empty micro-batch counted as one token",
             "token mean with every empty micro-batch counted as one token", lambda m: True, empty_as_one,
             "Pooled sums and counts; view: empty micro-batches"),
)  # fmt: skip
"""What a micro-batch contributes. The first entry is the correct one."""
