"""The rollout's training signal recomputed in float64 from records: rewards, GAE advantages, returns.

docs/metrics.md, "The update": the per-token reward is -kl_coef * KL (k1 or k3, over R, from the
rollout's policy and reference log-probs) plus the score at t = L + 1 when L + 1 < T, else at
t = L (L the last response position); the score loses `missing_eos_penalty` when the response
has no stop token. With `whiten_rewards` the rewards are whitened over V with their mean kept
(unbiased variance, + 1e-8 under the root), then 0 outside V. The values are 0 outside V. GAE
with gamma and lam runs over every position (the value past the last is 0); the returns are the
advantages *before* whitening plus the values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import NotRecomputable

from ..view import RolloutView
from .expect import kl_per_token, penalised
from .scores import Unscored


@dataclass(frozen=True)
class Signal:
    """What the rollout hands the update, as the contract has it, (N, T) each."""

    rewards: torch.Tensor
    """Per-token rewards before any whitening (what a reward-whitening call receives)."""
    advantages: torch.Tensor
    """GAE advantages before whitening (what the advantage-whitening call receives)."""
    returns: torch.Tensor
    """advantages + values: the value loss's target."""
    values: torch.Tensor
    """The old values, 0 outside V."""


def landing(response_mask: torch.Tensor) -> torch.Tensor:
    """(N,) where each row's score lands: L + 1 when it is inside the response width, else L."""
    last = response_mask.sum(dim=-1) - 1
    return (last + 1).clamp(min=0, max=response_mask.shape[-1] - 1)


def whiten_keep_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Whitened over `mask` (unbiased variance, + 1e-8), the mean added back; 0 outside `mask`."""
    count = mask.sum()
    zero = torch.zeros_like(values)
    mean = torch.where(mask, values, zero).sum() / count.clamp(min=1)
    var = torch.where(mask, (values - mean) ** 2, zero).sum() / (count - 1) if count > 1 else torch.tensor(0.0)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8) + mean
    return torch.where(mask, whitened, zero)


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Generalised advantage estimates over every position, the value past the last taken as 0."""
    width = rewards.shape[-1]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(width)):
        following = values[:, t + 1] if t + 1 < width else torch.zeros_like(running)
        running = rewards[:, t] + gamma * following - values[:, t] + gamma * lam * running
        advantages[:, t] = running
    return advantages


def rewards(rollout: RolloutView, scores: Any, spec: Any) -> torch.Tensor:
    """(N, T) per-token rewards before whitening; NotRecomputable without reference log-probs or scores."""
    if rollout.ref_logprobs is None:
        raise NotRecomputable(rollout.ref_problem or "no reference log-probs were recorded")
    if scores is None:
        raise NotRecomputable("no scores were supplied to the oracle: the rewards are unknown")
    if isinstance(scores, Unscored):
        raise NotRecomputable(scores.reason)
    r = rollout.response_mask
    score = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    if score.numel() != rollout.samples:
        raise NotRecomputable(f"{score.numel()} scores were supplied for {rollout.samples} rollout samples")
    if spec.missing_eos_penalty is not None:
        score = penalised(score, [rollout.has_stop], spec.missing_eos_penalty)
    kl = kl_per_token(rollout.logprobs, rollout.ref_logprobs, spec.kl_estimator)
    out = -spec.kl_coef * torch.where(r, kl, torch.zeros_like(kl))
    out[torch.arange(rollout.samples), landing(r)] += score
    return out


def recompute(rollout: RolloutView, values: torch.Tensor, scores: Any, spec: Any) -> Signal:
    """The rollout's signal from its records, the old values (0 outside V) and the scores handed to the trainer."""
    raw = rewards(rollout, scores, spec)
    used = whiten_keep_mean(raw, rollout.value_mask) if spec.whiten_rewards else raw
    advantages = gae(used, values, spec.gamma, spec.lam)
    return Signal(raw, advantages, advantages + values, values)
