"""TRL's adaptive entropy control (`use_adaptive_entropy`, Skywork-OR1; docs/grpo-metrics.md section 4): the entropy
bonus's coefficient each optimizer step applies, recomputed in float64 from the loss records.

entropy_coef is the first coefficient c. Before each window the trainer applies c where the previous window's mean
entropy was at or below entropy_target, else 0 (none before the first step: the previous mean starts at infinity).
After the window's step, with H its mean entropy over the tokens the bonus acts on, every rank's together, c moves to
min(c + delta, c_max) where H is at or below the target, else to max(c - delta, c_min) (TRL's `_compute_loss`,
1.12.0 and 1.16.0). A window whose H lies within the rounding margin of the target may have sent the trainer either
way: every later window's coefficient is uncertain, and not compared.

The variants (`gate`, `adapt`, `lag`) are the wrong controls of wrong/entropy_bonus.py: no gate, no adjustment, or
each window adjusted by its own mean before its step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.instrument.loss import LossRecord
from harness.tolerances import margin_of

ENTROPY_DTYPE = "float32"
"""The finest dtype the trainer sums the window's entropies in (TRL: `(entropies * effective_mask).sum()` of the
float32 entropies, `accelerator.reduce`)."""


@dataclass(frozen=True)
class Control:
    """A run's adaptive entropy control: its first coefficient, floor, ceiling, step and target."""

    initial: float
    minimum: float
    maximum: float
    delta: float
    target: float

    @classmethod
    def of(cls, spec: Any) -> Control | None:
        """The control of `spec` (a GRPOSpec's fields), None where use_adaptive_entropy is off."""
        if not getattr(spec, "use_adaptive_entropy", False):
            return None
        return cls(spec.entropy_coef, spec.entropy_coef_min, spec.entropy_coef_max, spec.entropy_coef_delta,
                   spec.entropy_target)  # fmt: skip


def window_means(records: Sequence[LossRecord], acting: Sequence[torch.Tensor]) -> dict[int, float]:
    """Each window's mean entropy over the tokens the bonus acts on, every rank's records together (0 for a window
    without such a token: its count is clamped to 1, as TRL's)."""
    sums: dict[int, float] = {}
    counts: dict[int, float] = {}
    for record, act in zip(records, acting):
        w = int(record.window)
        entropies = record.entropies.double() if record.entropies is not None else torch.zeros_like(act.double())
        sums[w] = sums.get(w, 0.0) + float((entropies * act).sum())
        counts[w] = counts.get(w, 0.0) + float(act.sum())
    return {w: sums[w] / max(counts[w], 1.0) for w in sums}


def applied(means: Mapping[int, float], control: Control, gate: bool = True, adapt: bool = True,
            lag: bool = True) -> tuple[dict[int, float], set[int]]:  # fmt: skip
    """(the coefficient each window applies, the windows whose coefficient is uncertain): the control of the module
    docstring over the windows in order; `gate=False` applies c whatever the last mean, `adapt=False` never moves c,
    `lag=False` moves c by each window's own mean before the window applies it."""
    margin = margin_of(ENTROPY_DTYPE)
    coef, last, unsure = control.initial, math.inf, False
    out, uncertain = {}, set()

    def moved(c: float, mean: float) -> float:
        if not adapt:
            return c
        return min(c + control.delta, control.maximum) if mean <= control.target else max(c - control.delta,
                                                                                             control.minimum)

    for w in sorted(means):
        mean = means[w]
        if not lag:
            coef, last = moved(coef, mean), mean
        out[w] = coef if (not gate or last <= control.target) else 0.0
        if unsure:
            uncertain.add(w)
        unsure = unsure or abs(mean - control.target) <= margin * max(abs(control.target), abs(mean), 1.0)
        if lag:
            coef, last = moved(coef, mean), mean
    return out, uncertain
