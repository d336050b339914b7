"""The per-token log-probs and entropies a trainer computed, against float64 recomputations of their formulas.

`LogitGaps` keeps, while one micro-batch of a trainer's loss runs, the largest absolute difference
over the micro-batch's tokens between what the trainer's functions returned and the float64 formula
of what they were given. It wraps three shapes of function:

- `wrap(log_softmax, entropy)`: `selective_log_softmax(logits, index)` and `entropy_from_logits(logits)`:
  the log-prob of the chosen token under `log_softmax(logits)`, and the entropy of `softmax(logits)`
  for the logits the log-probs came from (the temperature-scaled logits of the loss; the logits passed
  in when there were none);
- `wrap_joint(function)`: `function(logits, index, entropy_requires_grad=True, temperature=1.0,
  row_mask=None) -> (logps, entropies)`, both of `softmax(logits / temperature)`, 0 where `row_mask`
  is 0;
- `wrap_head(function)`: a fused LM head, `function(hidden, weight, bias, targets, temperature,
  chunk_size, softcap=None, scale=1.0, ...) -> (logps, entropies, ...)`, whose logits are never made:
  the log-prob of each target and the entropy under the head's logits recomputed from the hidden
  states (`head_logits_f64`).

The recomputation goes a few rows (or tokens) at a time, on the CPU, so its memory does not grow with
the whole micro-batch times the vocabulary. Its values at infinite logits are those of the spy's
`reduce_logits` (`log_softmax_f64`): a -inf logit (a masked token) adds nothing to the entropy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .loss import LogitGapRecord
from .tensors import log_softmax_f64

ROWS = 4
"""Rows of logits recomputed at once."""
TOKENS = 64
"""Hidden states (tokens) projected through the head at once."""


def _scaled(rows: torch.Tensor, temperature: float) -> torch.Tensor:
    rows = rows.detach().to("cpu", torch.float64)
    return rows if temperature == 1.0 else rows / float(temperature)


def logps_f64(logits: torch.Tensor, index: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / temperature)[index] in float64 (the division too), on CPU (`log_softmax_f64`)."""
    out = []
    for start in range(0, logits.shape[0], ROWS):
        rows = _scaled(logits[start : start + ROWS], temperature)
        picked = index[start : start + ROWS].detach().to("cpu").unsqueeze(-1)
        out.append(torch.log_softmax(rows, dim=-1).gather(-1, picked).squeeze(-1))  # log_softmax_f64's, no entropy
    return torch.cat(out)


def entropy_f64(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) over the last dimension, in float64 (the division too), on CPU
    (`log_softmax_f64`: a -inf logit adds nothing)."""
    out = []
    for start in range(0, logits.shape[0], ROWS):
        out.append(log_softmax_f64(_scaled(logits[start : start + ROWS], temperature))[1])
    return torch.cat(out)


def head_logits_f64(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    scale: float = 1.0,
    softcap: float | None = None,
) -> torch.Tensor:
    """The logits of an LM head in float64, on CPU: `z = hidden @ weight.T + bias`, times `scale`, then
    `softcap * tanh(z / softcap)` when `softcap` is set, divided by `temperature`. `hidden`: (..., H), `weight`:
    (V, H), `bias`: (V,) or None; the result is (..., V)."""
    w = weight.detach().to("cpu", torch.float64)
    z = hidden.detach().to("cpu", torch.float64) @ w.T
    if bias is not None:
        z = z + bias.detach().to("cpu", torch.float64)
    z = z * float(scale)
    if softcap is not None:
        z = float(softcap) * torch.tanh(z / float(softcap))
    return z / float(temperature)


def head_f64(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    scale: float = 1.0,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-prob of each target and the entropy under `head_logits_f64(hidden, weight, ...)`, in float64, on
    CPU, `TOKENS` hidden states at a time; `hidden`: (..., H), `targets`: (...), both results shaped as `targets`."""
    flat = hidden.detach().reshape(-1, hidden.shape[-1])
    picked = targets.detach().to("cpu").reshape(-1)
    weight = weight.detach().to("cpu", torch.float64)  # once, not per chunk
    bias = None if bias is None else bias.detach().to("cpu", torch.float64)
    logps, entropies = [], []
    for start in range(0, flat.shape[0], TOKENS):
        z = head_logits_f64(flat[start : start + TOKENS], weight, bias, temperature, scale, softcap)
        log_p, entropy = log_softmax_f64(z)
        logps.append(log_p.gather(-1, picked[start : start + TOKENS].unsqueeze(-1)).squeeze(-1))
        entropies.append(entropy)
    shape = targets.shape
    if not logps:
        empty = torch.zeros(shape, dtype=torch.float64)
        return empty, empty.clone()
    return torch.cat(logps).reshape(shape), torch.cat(entropies).reshape(shape)


def _largest(got: torch.Tensor, want: torch.Tensor) -> float:
    got = got.detach().to("cpu", torch.float64)
    if got.shape != want.shape:
        return float("inf")
    return float((got - want).abs().max()) if got.numel() else 0.0


def _argument(args: tuple, kwargs: dict, place: int, name: str, default=None):
    """A call's argument at position `place` or under `name` (`default` when it was not given)."""
    if len(args) > place:
        return args[place]
    return kwargs.get(name, default)


@dataclass
class LogitGaps:
    """The largest gaps seen in one micro-batch (None: the function was not called)."""

    logps: float | None = None
    entropies: float | None = None
    _logits: torch.Tensor | None = None

    def _keep(self, key: str, got: torch.Tensor, want: torch.Tensor) -> None:
        """Keep the larger of the gap kept and this call's; a NaN gap stays (Python's max would drop it)."""
        gap, kept = _largest(got, want), getattr(self, key)
        if kept is None or math.isnan(gap) or (not math.isnan(kept) and gap > kept):
            setattr(self, key, gap)

    def wrap(self, log_softmax: Callable, entropy: Callable) -> tuple[Callable, Callable]:
        """Wrappers of the trainer's two functions that return what they return and keep the gaps."""

        def selective_log_softmax(logits, index):
            out = log_softmax(logits, index)
            with torch.no_grad():
                self._keep("logps", out, logps_f64(logits, index))
            self._logits = logits
            return out

        def entropy_from_logits(logits):
            out = entropy(logits)
            source = self._logits if self._logits is not None and self._logits.shape == logits.shape else logits
            with torch.no_grad():
                self._keep("entropies", out, entropy_f64(source))
            return out

        return selective_log_softmax, entropy_from_logits

    def wrap_joint(self, function: Callable) -> Callable:
        """A wrapper of `function(logits, index, entropy_requires_grad=True, temperature=1.0, row_mask=None)`, which
        returns the log-probs and entropies of `softmax(logits / temperature)` (0 where `row_mask` is 0): it returns
        what the function returned and keeps the gaps of both."""

        def selective_log_softmax_and_entropy(*args, **kwargs):
            out = function(*args, **kwargs)
            logits, index = _argument(args, kwargs, 0, "logits"), _argument(args, kwargs, 1, "index")
            temperature = _argument(args, kwargs, 3, "temperature", 1.0)
            row_mask = _argument(args, kwargs, 4, "row_mask")
            with torch.no_grad():
                logps, entropies = logps_f64(logits, index, temperature), entropy_f64(logits, temperature)
                if row_mask is not None:
                    kept = row_mask.detach().to("cpu") != 0
                    logps = torch.where(kept, logps, torch.zeros_like(logps))
                    entropies = torch.where(kept, entropies, torch.zeros_like(entropies))
                self._keep("logps", out[0], logps)
                self._keep("entropies", out[1], entropies)
            return out

        return selective_log_softmax_and_entropy

    def wrap_head(self, function: Callable) -> Callable:
        """A wrapper of a fused LM head `function(hidden, weight, bias, targets, temperature, chunk_size,
        softcap=None, scale=1.0, ...)` that returns `(logps, entropies, ...)` (entropies may be None): it returns
        what the function returned and keeps the gaps of both to `head_f64` of the hidden states it was given."""

        def fused_head(*args, **kwargs):
            out = function(*args, **kwargs)
            hidden, weight = _argument(args, kwargs, 0, "hidden"), _argument(args, kwargs, 1, "weight")
            bias, targets = _argument(args, kwargs, 2, "bias"), _argument(args, kwargs, 3, "targets")
            temperature = _argument(args, kwargs, 4, "temperature", 1.0)
            softcap = _argument(args, kwargs, 6, "final_logit_softcapping")
            scale = _argument(args, kwargs, 7, "logit_scale", 1.0)
            with torch.no_grad():
                logps, entropies = head_f64(hidden, weight, targets, bias, temperature, scale, softcap)
                self._keep("logps", out[0], logps)
                if out[1] is not None:
                    self._keep("entropies", out[1], entropies)
            return out

        return fused_head

    def gaps(self) -> dict[str, float | None]:
        """The gaps as the `logit_gaps` entry of a loss record handed as a dict."""
        return {"logps": self.logps, "entropies": self.entropies}

    def record(self) -> LogitGapRecord:
        """The gaps, frozen, as a `LossRecord`'s `logit_gaps`."""
        return LogitGapRecord(self.logps, self.entropies)
