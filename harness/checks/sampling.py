"""The rollout's tokens are draws from the distribution its own log-probs describe (any algorithm's rollout).

At each response position t the trainer's rollout hands `selective_log_softmax` the logits of the
policy (already divided by the temperature: docs/metrics.md) and the token y_t it sampled. If y_t
was drawn from p_t = softmax(logits_t), then s_t = -log p_t(y_t) - H(p_t) has mean 0 given all
that came before t, and variance V_t = Var[log p_t] under p_t (the spy records both H and V from
the logits, in float64). S = sum of s_t over the drawn tokens is a martingale, and Z = S / sqrt(sum V_t)
is close to a standard normal over the few hundred tokens of a run, whatever the policy.

A trainer whose rollout decodes greedily (s_t < 0 at every token), samples at another temperature
than its log-probs are taken at, or samples from a filtered distribution (top-k, top-p) gives a
|Z| of several tens on the toy world; one that samples what it reports gives |Z| of about 1.

Which positions were drawn: every position of R, and the position after a response's last real
token when the response did not end with the stop token (the pad drawn there ended it; leaving
it out would bias S). Positions after a stop token are not counted: some trainers stop sampling
there, some sample on and truncate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch

from harness.oracle.masks import derive_masks
from harness.tolerances import SAMPLING_Z
from harness.verdict import Check


class DrawnRollout(Protocol):
    """What the check reads of one rollout: the sampled ids, their log-probs, and the entropy and log-prob
    variance of the distribution each was drawn from ((N, T) float64 each; the variance None when not recorded)."""

    responses: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    logprob_variance: torch.Tensor | None


def drawn_positions(responses: torch.Tensor, stop: int | None, pad: int) -> torch.Tensor:
    """(N, T) bool: the positions whose token the rollout drew (R, and a pad drawn after the last real token)."""
    response_mask, value_mask = derive_masks(responses, stop, pad)
    ended_by_pad = value_mask & ~response_mask
    if stop is not None:
        last = response_mask.sum(dim=-1) - 1
        final = responses.gather(-1, last.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        stopped = (last >= 0) & (final == stop)
        ended_by_pad &= ~stopped.unsqueeze(-1)
    return response_mask | ended_by_pad


def sampling_z(rollouts: Sequence[DrawnRollout], stop: int | None, pad: int) -> tuple[float, int]:
    """(Z, number of drawn tokens) over every rollout; Z is NaN when no token was drawn or no variance recorded."""
    total, variance, tokens = 0.0, 0.0, 0
    for rollout in rollouts:
        if rollout.logprob_variance is None:
            return math.nan, 0
        drawn = drawn_positions(rollout.responses, stop, pad)
        surprise = -rollout.logprobs - rollout.entropy
        total += float(surprise[drawn].sum())
        variance += float(rollout.logprob_variance[drawn].sum())
        tokens += int(drawn.sum())
    if tokens == 0 or not variance > 0:
        return math.nan, tokens
    return total / math.sqrt(variance), tokens


def judge_sampling(rollouts: Sequence[DrawnRollout], stop: int | None, pad: int, check: Check, where: str) -> None:
    """Fail `check` unless the rollouts' drawn tokens look like draws from their own log-probs (|Z| <= SAMPLING_Z)."""
    if any(r.logprob_variance is None for r in rollouts):
        check.fail(f"{where}: the spy recorded no log-prob variance for the rollout: sampling not recomputable")
        return
    z, tokens = sampling_z(rollouts, stop, pad)
    if tokens == 0:
        check.fail(f"{where}: no drawn response token was recorded: nothing to judge the sampling by")
    elif not math.isfinite(z):
        check.fail(f"{where}: Z is {z} over {tokens} drawn tokens (no spread to judge by, or a non-finite log-prob)")
    elif abs(z) > SAMPLING_Z:
        lean = (
            "more probable than draws from the rollout's own distribution (greedy or colder sampling, or "
            "filtered by top-k/top-p?)"
            if z < 0
            else "less probable than draws from the rollout's own distribution (hotter sampling than the "
            "log-probs' temperature?)"
        )
        check.fail(
            f"{where}: Z = {z:.2f} over {tokens} drawn tokens (|Z| <= {SAMPLING_Z:g} for tokens drawn from "
            f"softmax(logits / temperature)): the sampled tokens are {lean}"
        )
    else:
        check.note(f"{where}: Z = {z:.2f} over {tokens} drawn tokens")
