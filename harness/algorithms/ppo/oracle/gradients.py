"""The gradient of the loss at the new log-probs, against the formula of docs/metrics.md ("The update").

The loss of a minibatch m is (1 / N_R(m)) * sum over R of max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps))
plus the value term, N_R(m) the response tokens of the whole minibatch (all its micro-batches). Its
derivative at logp_new of a token t (rho = exp(logp_new - logp_old), so d rho / d logp_new = rho) is

    -A_t * rho_t / N_R(m)   on R, where rho_t lies inside [1 - eps, 1 + eps] (both branches are one function
                            there) or the unclipped branch is strictly the larger,
    0                       where the clipped branch is strictly the larger (it is flat in rho), and outside R.

The value term does not depend on logp_new. The spy records dL/dlogp_new per token (a hook on the tensor
`selective_log_softmax` returned in each micro-batch); the oracle recomputes the above in float64 from the
records, A whitened as in `signal.py`. Unlike a comparison of two cuts, the formula does not move with the
cut: a normaliser off by the same factor everywhere, a mean of micro-batch means, a loss divided by the
accumulation steps all show. Tokens within CLIP_MARGIN (harness/tolerances.py) of the clip edges may round to
either side in the trainer's dtype: not compared. One process: on more, data parallelism averages the ranks'
gradients and each rank's own dL/dlogp is world / N_R(global) times the above; `verify-dist` is left to compare
those.
"""

from __future__ import annotations

import torch

from harness.errors import NotRecomputable
from harness.oracle.gradients import Factor, factor_note
from harness.oracle.pooling import Expectation
from harness.tolerances import margin_of

from ..view import MicroBatchView, UpdateView
from .signal import advantages, near_the_clip

METRIC = "gradient/logp"


def minibatches(update: UpdateView, per_minibatch: int) -> list[tuple[MicroBatchView, ...]]:
    """The update's micro-batches, in the order they ran, grouped `per_minibatch` to an optimizer step."""
    micro = update.micro_batches
    if per_minibatch < 1 or len(micro) % per_minibatch:
        raise NotRecomputable(
            f"update {update.index + 1}: {len(micro)} micro-batches do not make minibatches of {per_minibatch}"
        )
    return [tuple(micro[i : i + per_minibatch]) for i in range(0, len(micro), per_minibatch)]


def logp_gradient(a: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, eps: float, count: int) -> torch.Tensor:
    """d(minibatch policy loss) / d(logp_new) per token, float64: the formula of the module docstring."""
    ratio = log_ratio.exp()
    inside = (ratio >= 1 - eps) & (ratio <= 1 + eps)
    unclipped_wins = -a * ratio > -a * ratio.clamp(1 - eps, 1 + eps)
    live = mask & (inside | unclipped_wins)
    return torch.where(live, -a * ratio / max(count, 1), torch.zeros_like(a))


def recorded(micro: MicroBatchView) -> torch.Tensor:
    """The recorded dL/dlogp_new of a micro-batch; NotRecomputable when no backward pass reached it."""
    grad = micro.record.grad
    if grad is None:
        raise NotRecomputable(
            f"{micro.where}: no gradient reached the log-probs selective_log_softmax returned (the loss was "
            "not built from them, or they did not require grad)"
        )
    if grad.shape != micro.record.logprobs.shape:
        shapes = f"gradient {tuple(grad.shape)} for log-probs {tuple(micro.record.logprobs.shape)}"
        raise NotRecomputable(f"{micro.where}: {shapes}")
    return grad


def minibatch_counts(update: UpdateView, per_minibatch: int) -> list[int]:
    """N_R of each minibatch of the update, from the oracle's masks."""
    return [sum(int(micro.response_mask.sum()) for micro in group) for group in minibatches(update, per_minibatch)]


def gaps(update: UpdateView, per_minibatch: int, cliprange: float, dtype: str, counts: list[int] | None = None,
         reduced: float = 1.0) -> tuple[float, float, list[Factor]]:  # fmt: skip
    """(largest |recorded - formula| over the compared tokens, mean |formula| over R, per-micro-batch factors);
    NotRecomputable when the records do not show it. `counts`: N_R of each minibatch over every process (by
    default this update's own); `reduced`: what the reduction across processes multiplies each process's
    gradient by (1 alone; 1 / world where data parallelism averages), applied to the recorded gradient."""
    a = advantages(update)
    largest, size, tokens, factors = 0.0, 0.0, 0, []
    margin = margin_of(dtype)
    groups = minibatches(update, per_minibatch)
    counts = minibatch_counts(update, per_minibatch) if counts is None else counts
    if len(counts) != len(groups):
        raise NotRecomputable(f"update {update.index + 1}: {len(groups)} minibatches, {len(counts)} counts")
    for group, count in zip(groups, counts):
        for micro in group:
            if micro.rollout_rows is None:
                raise NotRecomputable(f"{micro.where}: {micro.old_problem}")
            log_ratio, r = micro.log_ratio(), micro.response_mask
            want = logp_gradient(a[micro.rollout_rows], log_ratio, r, cliprange, count)
            got = reduced * recorded(micro)
            compared = ~(r & near_the_clip(log_ratio, cliprange, margin))
            largest = max(largest, float(torch.where(compared, (got - want).abs(), torch.zeros_like(want)).max()))
            size += float(want.abs().sum())
            tokens += int(r.sum())
            norm = float((want * want).sum())
            factors.append((float((got * want).sum()) / norm if norm > 0 else float("nan"), int(r.sum()), count))
    return largest, size / max(tokens, 1), factors


def expectation(update: UpdateView, per_minibatch: int, cliprange: float, dtype: str
                ) -> tuple[dict[str, float], dict[str, Expectation], str]:  # fmt: skip
    """(the largest gap, as if logged; an Expectation of 0 with its scale; a note on the factors) for compare."""
    try:
        largest, scale, factors = gaps(update, per_minibatch, cliprange, dtype)
    except NotRecomputable as why:
        return {METRIC: 0.0}, {METRIC: Expectation.unknown(METRIC, str(why))}, ""
    return {METRIC: largest}, {METRIC: Expectation(METRIC, 0.0, scale=scale)}, factor_note(factors)
