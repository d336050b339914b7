"""The value side of the training signal: raw rewards and advantages at the whitening calls, and the per-token
value loss and its clip indicator handed to masked_mean (docs/metrics.md, "The update").

The oracle recomputes the rollout's rewards, GAE advantages and returns from the records
(`returns.py`; old values from the value-head hook, `values.py`) and compares:

- per_token/advantages_raw: the values of the last whitening call (the advantages) over R;
- per_token/rewards: with `whiten_rewards`, the values of the whitening call before it, over V (its mask
  must be V);
- per_token/vf_loss: the vf_loss site's values over V, max((v_new - G)^2, (v_clip - G)^2) with
  v_clip = clamp(v_new, v_old - c, v_old + c) (the 0.5 of loss/value_avg is outside masked_mean);
- per_token/vf_clipfrac: the vf_clipfrac site's values, [(v_clip - G)^2 > (v_new - G)^2], over V,
  except where v_new is within the clip margin of v_old +- c, or the two squared errors nearly tie.

Each gap is the largest |recorded - formula|; its scale the mean |formula| over the mask.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.errors import NotRecomputable
from harness.oracle.masks import mask_difference
from harness.tolerances import tie_margin_of

from ..view import UpdateView
from .returns import Signal, recompute
from .values import micro_batch_values, rollout_values

RAW = ("per_token/advantages_raw",)
REWARDS = "per_token/rewards"
VALUE = ("per_token/vf_loss", "per_token/vf_clipfrac")
Gaps = dict[str, tuple[float, float]]


def names(whiten_rewards: bool) -> tuple[str, ...]:
    """The value-side metrics a run with these settings is checked on."""
    return RAW + ((REWARDS,) if whiten_rewards else ()) + VALUE


def _gap(got: torch.Tensor, want: torch.Tensor, where: torch.Tensor, what: str) -> tuple[float, float]:
    """(largest |got - want| over `where`, mean |want| over it)."""
    if got.shape != want.shape:
        raise NotRecomputable(f"{what}: recorded values of shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    zero = torch.zeros_like(want)
    gap = float(torch.where(where, (got - want).abs(), zero).max()) if want.numel() else 0.0
    size = float(torch.where(where, want.abs(), zero).sum()) / max(int(where.sum()), 1)
    return gap, size


def signal_of(update: UpdateView, spec: Any, scores: Any) -> Signal:
    """The rollout's recomputed signal (NotRecomputable without rollout, old values or scores)."""
    values = rollout_values(update)
    return recompute(update.rollout, values, scores, spec)


def raw_gaps(update: UpdateView, signal: Signal, whiten_rewards: bool) -> Gaps:
    """per_token/advantages_raw (and per_token/rewards with reward whitening) at the whitening calls."""
    calls, where = update.whitening, f"update {update.index}"
    wanted = 2 if whiten_rewards else 1
    if len(calls) < wanted:
        raise NotRecomputable(
            f"{where}: {len(calls)} masked_mean calls inside the trainer's whitening function before training, "
            f"expected {wanted} ({'rewards, then ' if whiten_rewards else ''}advantages)"
        )
    rollout = update.rollout
    out = {RAW[0]: _gap(calls[-1].values, signal.advantages, rollout.response_mask, f"{where} advantages")}
    if whiten_rewards:
        problem = mask_difference(calls[-2].mask, rollout.value_mask)
        if problem:
            raise NotRecomputable(f"{where}: rewards whitened over a mask that {problem} V")
        out[REWARDS] = _gap(calls[-2].values, signal.rewards, rollout.value_mask, f"{where} rewards")
    return out


def value_terms(v_new: torch.Tensor, v_old: torch.Tensor, returns: torch.Tensor, clip: float):
    """(per-token clipped value loss without the 0.5, clip indicator) in float64."""
    loss, indicator, _ = _value_terms(v_new, v_old, returns, clip)
    return loss, indicator


def _value_terms(v_new: torch.Tensor, v_old: torch.Tensor, returns: torch.Tensor, clip: float):
    """(loss, indicator, |clipped - unclipped| / (1 + the larger), inf where v_new is not clipped at all): the
    last tells near ties apart; inside the clip range the two are equal and the indicator is exactly 0."""
    v_clip = torch.maximum(torch.minimum(v_new, v_old + clip), v_old - clip)
    unclipped, clipped = (v_new - returns) ** 2, (v_clip - returns) ** 2
    larger = torch.maximum(unclipped, clipped)
    apart = torch.where(v_clip == v_new, torch.full_like(larger, torch.inf), (clipped - unclipped).abs() / (1 + larger))
    return larger, (clipped > unclipped).double(), apart


def value_gaps(update: UpdateView, signal: Signal, clip: float, margin: float, tie: float = 1e-9) -> Gaps:
    """per_token/vf_loss and per_token/vf_clipfrac over every micro-batch of the update."""
    gaps = {name: 0.0 for name in VALUE}
    sizes = {name: 0.0 for name in VALUE}
    tokens = 0
    for micro, v_new in zip(update.micro_batches, micro_batch_values(update)):
        if micro.rollout_rows is None:
            raise NotRecomputable(f"{micro.where}: {micro.old_problem}")
        rows, v = micro.rollout_rows, micro.value_mask
        v_old = signal.values[rows]
        loss, indicator, apart = _value_terms(v_new, v_old, signal.returns[rows], clip)
        edge = ((v_new - (v_old + clip)).abs() < margin) | ((v_new - (v_old - clip)).abs() < margin) | (apart < tie)
        count = int(v.sum())
        tokens += count
        for name, role, want, where in (
            ("per_token/vf_loss", "vf_loss", loss, v),
            ("per_token/vf_clipfrac", "vf_clipfrac", indicator, v & ~edge),
        ):
            gap, size = _gap(micro.site_values(role), want, where, micro.where)
            gaps[name] = max(gaps[name], gap)
            sizes[name] += size * count
    return {name: (gaps[name], sizes[name] / max(tokens, 1)) for name in VALUE}


def largest_gaps(update: UpdateView, spec: Any, scores: Any, margin: float) -> dict[str, tuple[float, float] | str]:
    """metric -> (gap, scale), or the reason it is not recomputable (per metric group)."""
    out: dict[str, tuple[float, float] | str] = {}
    try:
        signal = signal_of(update, spec, scores)
    except NotRecomputable as why:
        return {name: str(why) for name in names(spec.whiten_rewards)}
    for group, gaps in (
        (RAW + ((REWARDS,) if spec.whiten_rewards else ()), lambda: raw_gaps(update, signal, spec.whiten_rewards)),
        (VALUE, lambda: value_gaps(update, signal, spec.cliprange_value, margin, tie_margin_of(spec.dtype))),
    ):
        try:
            out.update(gaps())
        except NotRecomputable as why:
            out.update({name: str(why) for name in group})
    return out
