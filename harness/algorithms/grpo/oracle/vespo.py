"""vespo's sequence weight phi(w), and the size of what its rounding carries (docs/grpo-metrics.md, section 4)."""

from __future__ import annotations

import math
from typing import Protocol

import torch


class Settings(Protocol):
    """vespo's settings (`expect.Settings` has them, as a GRPOSpec does)."""

    vespo_k_pos: float
    vespo_lambda_pos: float
    vespo_k_neg: float
    vespo_lambda_neg: float


VESPO_CLAMP = (math.log(1e-8), 20.0)
"""vespo's bounds on a sequence's log importance weight; each token's log-ratio is first bounded by +-20 (TRL's
`get_gamma_weights`, docs/grpo-metrics.md section 4)."""


def vespo_parts(log_ratio: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, s: Settings) -> tuple:
    """(B, 1) each: log w (the masked sum of the tokens' bounded log-ratios, bounded), k and lambda (the `_pos`
    ones where A >= 0; `adv` is (B, 1))."""
    log_w = (log_ratio.clamp(-20.0, 20.0) * mask).sum(dim=1, keepdim=True).clamp(*VESPO_CLAMP)
    nonnegative = adv >= 0
    k = torch.where(nonnegative, s.vespo_k_pos, s.vespo_k_neg)
    lam = torch.where(nonnegative, s.vespo_lambda_pos, s.vespo_lambda_neg)
    return log_w, k, lam


def vespo_phi(log_ratio: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, s: Settings) -> torch.Tensor:
    """(B, 1) phi(w) = exp(lambda + k log w - lambda w), w = exp(the masked sum of the tokens' log-ratios), k and
    lambda the `_pos` ones where A >= 0 (`adv` is (B, 1)); a weight that overflows is 0."""
    log_w, k, lam = vespo_parts(log_ratio, mask, adv, s)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo_operands(weight: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor,
                   s: Settings) -> torch.Tensor:  # fmt: skip
    """(B, 1) the size of what rounding vespo's weight carries: phi (1 + |k - lambda w| (1 + sum |log r|)), the
    sensitivity of phi to its log-weight times the size of the sum of log-ratios it is made of."""
    log_w, k, lam = vespo_parts(log_ratio, mask, adv, s)
    size = 1 + (log_ratio.clamp(-20.0, 20.0).abs() * mask).sum(dim=1, keepdim=True)
    return weight * (1 + (k - lam * torch.exp(log_w)).abs() * size)
