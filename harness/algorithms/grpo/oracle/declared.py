"""The terms of GRPO's per-token loss that a target's definitions fix (definitions.py: `kl_clamp`,
`kl_importance_weighting`, `dual_clip_ratio`): the KL term, and the dual clip of the clipped surrogate.

    k3_t   exp(ref - logp) - (ref - logp) - 1, clamped at kl_clamp when one is declared: a token whose k3 lies
           above the clamp has the clamp's value and no gradient through the KL
    kl_t   r'_t k3_t where use_bias_correction_kl is set and kl_importance_weighting is 'as_configured' (r' the
           ratio, capped by delta for the clipped loss types); k3_t where it is not, or 'never'
    dual   where A < 0 and a dual_clip_ratio c is declared: l_t = min(-A c, -min(r A, clip(r) A)), so a token whose
           ratio is above c has the loss -A c and no policy gradient (the clipped loss types only)

With the default profile (trl: no clamp, weighting as configured, no dual clip) these are the contract's terms of
docs/grpo-metrics.md, section 4.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ..definitions import AS_CONFIGURED


class Settings(Protocol):
    """The settings the KL term and the dual clip read (`expect.Settings` has them)."""

    use_bias_correction_kl: bool
    kl_clamp: float | None
    kl_importance_weighting: str
    dual_clip_ratio: float | None


def kl_weighted(s: Settings) -> bool:
    """Whether the KL term is multiplied by the importance ratio: the run's use_bias_correction_kl, unless the
    target declares kl_importance_weighting 'never'."""
    return s.use_bias_correction_kl and s.kl_importance_weighting == AS_CONFIGURED


def k3(gap: torch.Tensor, s: Settings) -> torch.Tensor:
    """exp(gap) - gap - 1 (gap = ref - logp), clamped at the declared kl_clamp."""
    value = torch.exp(gap) - gap - 1
    return value if s.kl_clamp is None else value.clamp(max=s.kl_clamp)


def held_by_clamp(gap: torch.Tensor, s: Settings) -> torch.Tensor:
    """Where the clamp holds k3 (no gradient through it): exp(gap) - gap - 1 above kl_clamp; nowhere without one."""
    if s.kl_clamp is None:
        return torch.zeros_like(gap, dtype=torch.bool)
    return torch.exp(gap) - gap - 1 > s.kl_clamp


def near_clamp(gap: torch.Tensor, s: Settings, margin: float) -> torch.Tensor:
    """Where the trainer's rounding may put k3 on either side of the clamp (within `margin` of it, relative)."""
    if s.kl_clamp is None:
        return torch.zeros_like(gap, dtype=torch.bool)
    return (torch.exp(gap) - gap - 1 - s.kl_clamp).abs() <= margin * s.kl_clamp


def dual_clipped(loss: torch.Tensor, adv: torch.Tensor, s: Settings) -> torch.Tensor:
    """The per-token policy loss `loss` with the dual clip: min(loss, -A c) where A < 0 (unchanged without one)."""
    if s.dual_clip_ratio is None:
        return loss
    return torch.where(adv < 0, torch.minimum(loss, -adv * s.dual_clip_ratio), loss)


def beyond_dual_clip(ratio: torch.Tensor, adv: torch.Tensor, s: Settings) -> torch.Tensor:
    """Where the dual clip holds the loss at -A c (A < 0, r above c): no policy gradient there."""
    if s.dual_clip_ratio is None:
        return torch.zeros_like(ratio, dtype=torch.bool)
    return (adv < 0) & (ratio > s.dual_clip_ratio)


def near_dual_clip(ratio: torch.Tensor, adv: torch.Tensor, s: Settings, margin: float) -> torch.Tensor:
    """Where the trainer's rounding may put a ratio of A < 0 on either side of the dual clip's bound."""
    if s.dual_clip_ratio is None:
        return torch.zeros_like(ratio, dtype=torch.bool)
    return (adv < 0) & ((ratio - s.dual_clip_ratio).abs() <= margin * s.dual_clip_ratio)
