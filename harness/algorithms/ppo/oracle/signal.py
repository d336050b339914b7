"""The training signal, not only its pooling: the per-token policy loss the trainer hands to masked_mean
(and, through `value_signal.py`, the raw advantages and rewards, and the per-token value loss).

docs/metrics.md, "The update": the advantages used by the loss are the raw advantages whitened
over R (mean removed, unbiased variance, + 1e-8 under the root), 0 outside R; the per-token
policy loss is max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps)) with rho = exp(logp_new - logp_old),
and its clip indicator [clipped term > unclipped term]. The oracle reads the raw advantages where
the trainer whitens them (the masked_mean call inside its whitening function, `SiteMap.whiten`), recomputes the rest
in float64 from the records, and compares with the values recorded at the pg_loss and
pg_clipfrac sites. What the records do not show (no whitening call seen, rows not paired) is
not recomputable, with the reason.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.errors import NotRecomputable
from harness.oracle.masks import mask_difference
from harness.oracle.pooling import Expectation
from harness.tolerances import margin_of

from ..view import MicroBatchView, UpdateView
from . import value_signal

PER_TOKEN = ("per_token/pg_loss", "per_token/pg_clipfrac")
# Ratios (and new values, to v_old +- cliprange_value) within CLIP_MARGIN (harness/tolerances.py) of 1 +- eps may
# round to either side of the clip in the trainer's dtype: their clip indicator is not compared.
"""The largest gap between a recorded per-token value and the formula's, over every micro-batch of an update."""


def advantages(update: UpdateView) -> torch.Tensor:
    """(N, T) advantages the loss should use: the last whitening call's raw values, whitened over R, 0 outside."""
    if update.rollout is None:
        raise NotRecomputable(update.rollout_problem or "no rollout records")
    calls = update.whitening
    if not calls:
        raise NotRecomputable(
            f"update {update.index}: no masked_mean call inside the trainer's whitening function (site map: "
            "'whiten') was recorded before training, so the raw advantages are unknown"
        )
    raw, mask = calls[-1].values, update.rollout.response_mask
    problem = mask_difference(calls[-1].mask, mask)
    if problem:
        raise NotRecomputable(f"update {update.index}: advantages whitened over a mask that {problem} R")
    count = mask.sum()
    mean = torch.where(mask, raw, torch.zeros_like(raw)).sum() / count
    var = torch.where(mask, (raw - mean) ** 2, torch.zeros_like(raw)).sum() / (count - 1) if count > 1 else 0.0
    return torch.where(mask, (raw - mean) * torch.rsqrt(torch.as_tensor(var + 1e-8)), torch.zeros_like(raw))


def policy_terms(a: torch.Tensor, log_ratio: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token clipped surrogate loss, clip indicator) of docs/metrics.md, in float64."""
    ratio = log_ratio.exp()
    unclipped, clipped = -a * ratio, -a * ratio.clamp(1 - eps, 1 + eps)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).double()


def near_the_clip(log_ratio: torch.Tensor, eps: float, margin: float) -> torch.Tensor:
    """Tokens whose ratio lies within `margin` of 1 - eps or 1 + eps."""
    ratio = log_ratio.exp()
    return ((ratio - (1 + eps)).abs() < margin) | ((ratio - (1 - eps)).abs() < margin)


def largest_gaps(update: UpdateView, cliprange: float, dtype: str) -> dict[str, tuple[float, float]]:
    """metric -> (largest |recorded - formula| over R, mean |formula| over R); NotRecomputable otherwise."""
    a = advantages(update)
    gaps = {name: 0.0 for name in PER_TOKEN}
    sizes = {name: 0.0 for name in PER_TOKEN}
    tokens = 0
    for micro in update.micro_batches:
        loss, indicator = _micro_terms(micro, a, cliprange)
        r = micro.response_mask
        decided = r & ~near_the_clip(micro.log_ratio(), cliprange, margin_of(dtype))
        tokens += int(r.sum())
        compared = (
            ("per_token/pg_loss", "pg_loss", loss, r),
            ("per_token/pg_clipfrac", "pg_clipfrac", indicator, decided),
        )
        for name, role, want, where in compared:
            gap = torch.where(where, (micro.site_values(role) - want).abs(), torch.zeros_like(want))
            gaps[name] = max(gaps[name], float(gap.max()))
            sizes[name] += float(torch.where(r, want.abs(), torch.zeros_like(want)).sum())
    return {name: (gaps[name], sizes[name] / max(tokens, 1)) for name in PER_TOKEN}


def _micro_terms(micro: MicroBatchView, a: torch.Tensor, cliprange: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula's per-token loss and clip indicator for one micro-batch's rows."""
    if micro.rollout_rows is None:
        raise NotRecomputable(f"{micro.where}: {micro.old_problem}")
    return policy_terms(a[micro.rollout_rows], micro.log_ratio(), cliprange)


def expectations(update: UpdateView, spec: Any, scores: Any = None) -> tuple[dict[str, float], dict[str, Expectation]]:
    """(the largest gap per metric, as if logged; an Expectation of 0 gap each, with its scale) for compare.

    The policy side (pg_loss, pg_clipfrac) and the value side (`value_signal.py`: raw advantages, rewards
    when whitened, vf_loss, vf_clipfrac); each metric that cannot be recomputed is unknown, with the reason.
    """
    margin = margin_of(spec.dtype)
    try:
        found: dict[str, tuple[float, float] | str] = dict(largest_gaps(update, spec.cliprange, spec.dtype))
    except NotRecomputable as why:
        found = {name: str(why) for name in PER_TOKEN}
    found.update(value_signal.largest_gaps(update, spec, scores, margin))
    logged = {name: gap[0] if isinstance(gap, tuple) else 0.0 for name, gap in found.items()}
    expected = {
        name: Expectation(name, 0.0, scale=gap[1]) if isinstance(gap, tuple) else Expectation.unknown(name, gap)
        for name, gap in found.items()
    }
    return logged, expected
