"""The per-token log-probs and entropies a trainer computed, against float64 recomputations from its logits.

`LogitGaps.wrap` wraps a trainer's `selective_log_softmax(logits, index)` and
`entropy_from_logits(logits)` while one micro-batch of its loss runs, and keeps, for each, the
largest absolute difference over the micro-batch's tokens between what the function returned and
the float64 formula: the log-prob of the chosen token under `log_softmax(logits)`, and the entropy
of `softmax(logits)` for the logits the log-probs came from (the temperature-scaled logits of the
loss; the logits passed in when there were none). The recomputation goes a few rows at a time, on
the CPU, so its memory does not grow with the whole micro-batch times the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .loss import LogitGapRecord

ROWS = 4
"""Rows of logits recomputed at once."""


def logps_f64(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[index] in float64, on CPU."""
    out = []
    for start in range(0, logits.shape[0], ROWS):
        rows = logits[start : start + ROWS].detach().to("cpu", torch.float64)
        picked = index[start : start + ROWS].detach().to("cpu").unsqueeze(-1)
        out.append(torch.log_softmax(rows, dim=-1).gather(-1, picked).squeeze(-1))
    return torch.cat(out)


def entropy_f64(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension, in float64, on CPU."""
    out = []
    for start in range(0, logits.shape[0], ROWS):
        rows = logits[start : start + ROWS].detach().to("cpu", torch.float64)
        log_p = torch.log_softmax(rows, dim=-1)
        out.append(-(log_p.exp() * log_p).sum(dim=-1))
    return torch.cat(out)


def _largest(got: torch.Tensor, want: torch.Tensor) -> float:
    got = got.detach().to("cpu", torch.float64)
    if got.shape != want.shape:
        return float("inf")
    return float((got - want).abs().max()) if got.numel() else 0.0


@dataclass
class LogitGaps:
    """The largest gaps seen in one micro-batch (None: the function was not called)."""

    logps: float | None = None
    entropies: float | None = None
    _logits: torch.Tensor | None = None

    def wrap(self, log_softmax: Callable, entropy: Callable) -> tuple[Callable, Callable]:
        """Wrappers of the trainer's two functions that return what they return and keep the gaps."""

        def selective_log_softmax(logits, index):
            out = log_softmax(logits, index)
            with torch.no_grad():
                self.logps = max(self.logps or 0.0, _largest(out, logps_f64(logits, index)))
            self._logits = logits
            return out

        def entropy_from_logits(logits):
            out = entropy(logits)
            source = self._logits if self._logits is not None and self._logits.shape == logits.shape else logits
            with torch.no_grad():
                self.entropies = max(self.entropies or 0.0, _largest(out, entropy_f64(source)))
            return out

        return selective_log_softmax, entropy_from_logits

    def gaps(self) -> dict[str, float | None]:
        """The gaps as the `logit_gaps` entry of a loss record handed as a dict."""
        return {"logps": self.logps, "entropies": self.entropies}

    def record(self) -> LogitGapRecord:
        """The gaps, frozen, as a `LossRecord`'s `logit_gaps`."""
        return LogitGapRecord(self.logps, self.entropies)
