"""The gradient of the loss at the value head's output, against the formula of docs/metrics.md ("The update").

The value term of a minibatch m's loss is vf_coef * 0.5 * (1 / N_V(m)) * sum over V of
max((v - G)^2, (v_clip - G)^2), v_clip = clamp(v, v_old - c, v_old + c), N_V(m) the value tokens of the whole
minibatch, G the oracle's returns (returns.py). Its derivative at the new value v_t of a token t is

    vf_coef * (v_t - G_t) / N_V(m)   on V, where v_t lies inside [v_old - c, v_old + c] (the two squares are
                                     one function there) or the unclipped square is strictly the larger,
    0                                where the clipped square is strictly the larger (flat in v), and outside V.

The policy term does not depend on v. The spy records dL/d(head output) of each training forward (a hook on
the live output, values.py of the instrument); the value of response position t is read at the position
before it (values.py here), so the recorded gradient is read the same way, and every position that slice
does not use must have a gradient of 0. Tokens within the clip margin of v_old +- c, or whose two squares
nearly tie, may round to either branch in the trainer's dtype: not compared. A sign flipped on the value term
shows as a factor of -1, a lost 0.5 as 2; the policy-side check (gradients.py) cannot see either.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.errors import NotRecomputable
from harness.oracle.pooling import Expectation
from harness.tolerances import margin_of, tie_margin_of

from .gradients import Factor, factor_note, minibatches
from .value_signal import _value_terms, signal_of
from .values import _records, micro_batch_values

METRIC = "gradient/value"


def value_gradient(v_new: torch.Tensor, v_old: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                   clip: float, coef: float, count: int) -> torch.Tensor:  # fmt: skip
    """d(minibatch value term) / d(v_new) per token, float64: the formula of the module docstring."""
    v_clip = torch.maximum(torch.minimum(v_new, v_old + clip), v_old - clip)
    live = mask & ((v_clip == v_new) | ((v_new - returns) ** 2 > (v_clip - returns) ** 2))
    return torch.where(live, coef * (v_new - returns) / max(count, 1), torch.zeros_like(v_new))


def recorded(record: Any, width: int, where: str) -> tuple[torch.Tensor, float]:
    """(the recorded dL/dv at the response positions, largest |dL/dv| at every other position) of one training
    forward; NotRecomputable when no backward pass reached the head's output."""
    grad = record.dvalues
    if grad is None:
        raise NotRecomputable(
            f"{where}: no gradient reached the value head's output (the loss was not built from it, or no "
            "backward pass ran)"
        )
    if grad.dim() == 3 and grad.shape[-1] == 1:
        grad = grad.squeeze(-1)
    if grad.shape != record.values.shape:
        raise NotRecomputable(f"{where}: gradient {tuple(grad.shape)} for values {tuple(record.values.shape)}")
    length = grad.shape[1]
    used = torch.zeros_like(grad, dtype=torch.bool)
    used[:, length - width - 1 : length - 1] = True
    unused = float(grad.abs().masked_fill(used, 0.0).max()) if grad.numel() else 0.0
    return grad[:, length - width - 1 : length - 1], unused


def gaps(update: Any, spec: Any, scores: Any, per_minibatch: int) -> tuple[float, float, list[Factor]]:
    """(largest |recorded - formula| over the compared positions, mean |formula| over V, per-micro-batch factors
    (<recorded, formula> / <formula, formula>, n_V, N_V)); NotRecomputable when the records do not show it."""
    signal = signal_of(update, spec, scores)
    values = micro_batch_values(update)
    heads = _records(update, grad=True)
    margin, tie = margin_of(spec.dtype), tie_margin_of(spec.dtype)
    clip = spec.cliprange_value
    largest, size, tokens, k, factors = 0.0, 0.0, 0, 0, []
    for group in minibatches(update, per_minibatch):
        count = sum(int(micro.value_mask.sum()) for micro in group)
        for micro in group:
            if micro.rollout_rows is None:
                raise NotRecomputable(f"{micro.where}: {micro.old_problem}")
            rows, v, v_new = micro.rollout_rows, micro.value_mask, values[k]
            got, unused = recorded(heads[k], micro.responses.shape[1], micro.where)
            k += 1
            v_old, returns = signal.values[rows], signal.returns[rows]
            want = value_gradient(v_new, v_old, returns, v, clip, spec.vf_coef, count)
            _, _, apart = _value_terms(v_new, v_old, returns, clip)
            edge = ((v_new - (v_old + clip)).abs() < margin) | ((v_new - (v_old - clip)).abs() < margin)
            compared = ~(v & (edge | (apart < tie)))
            gap = torch.where(compared, (got - want).abs(), torch.zeros_like(want))
            largest = max(largest, unused, float(gap.max()) if gap.numel() else 0.0)
            size += float(want.abs().sum())
            tokens += int(v.sum())
            norm = float((want * want).sum())
            factors.append((float((got * want).sum()) / norm if norm > 0 else float("nan"), int(v.sum()), count))
    return largest, size / max(tokens, 1), factors


def expectation(update: Any, spec: Any, scores: Any, per_minibatch: int
                ) -> tuple[dict[str, float], dict[str, Expectation], str]:  # fmt: skip
    """(the largest gap, as if logged; an Expectation of 0 with its scale; a note on the factor) for compare."""
    try:
        largest, scale, factors = gaps(update, spec, scores, per_minibatch)
    except NotRecomputable as why:
        return {METRIC: 0.0}, {METRIC: Expectation.unknown(METRIC, str(why))}, ""
    return {METRIC: largest}, {METRIC: Expectation(METRIC, 0.0, scale=scale)}, factor_note(factors, "dL/dv")
