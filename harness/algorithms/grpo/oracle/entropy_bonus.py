"""The gradient of a GRPO window's loss at the per-token entropies: the entropy bonus (TRL's `entropy_coef`,
docs/grpo-metrics.md section 4), recomputed in float64 from the loss records.

The loss is the policy objective less coef * H, H the mean per-token entropy of the optimizer step's window: its
tokens on every rank, so that no micro-batch cut and no rank moves it. dL/dH_t is -coef / N_W at each token t the
bonus acts on, N_W those tokens of the window on every rank, and 0 at every other position; each rank's loss is
multiplied by the number of ranks (data parallelism averages their gradients), so the gradient a rank's backward
pass delivers to its entropies is -coef * world / N_W. The tokens the bonus acts on are the completion mask's, times
the entropy mask where top_entropy_quantile < 1 (TRL's `_compute_loss`: `effective_mask = mask * entropy_mask`, "so
it acts on the same tokens" as the policy term; entropy_mask.py); a window holding a token within rounding of its
micro-batch's entropy threshold has an uncertain N_W and is not compared.

Under adaptive entropy control (use_adaptive_entropy) coef is each window's own, the one the control applies
(adaptive_entropy.py): 0 where it holds the bonus off. A run whose every window holds it off is compared at the
size its first coefficient would have (the mean |formula| is 0 there).

The targets record that gradient per micro-batch (`entropy_grad`, a hook on the entropies the loss used); a record
without it is not recomputable. Each token's gap is relative to its own size floored at the mean |formula| over the
masked tokens, as the gradient at the log-probs' (gradients.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.errors import NotRecomputable
from harness.instrument.loss import LossRecord

from .adaptive_entropy import Control, applied, window_means
from .entropy_mask import entropy_masks
from .gradients import Token, mean_scale, relative_gaps

METRIC = "gradient/entropy_relative"


@dataclass(frozen=True)
class BonusRow:
    """One micro-batch as compared: the recorded dL/dH, the formula's, and the tokens the bonus acts on."""

    label: str
    got: torch.Tensor
    want: torch.Tensor
    acting: torch.Tensor
    """(B, T) bool: the tokens the bonus acts on (the mask, under the entropy mask its kept tokens)."""
    record: LossRecord
    coef: float = 0.0
    """The coefficient its window applies (entropy_coef, or adaptive control's)."""


@dataclass(frozen=True)
class BonusGaps:
    """The comparison of one run's recorded gradients at the entropies with the formula."""

    largest: float
    """The largest |recorded - formula| / (|formula| + scale) over the compared positions (a NaN stays)."""
    where: str
    scale: float
    """Mean |formula| over the masked tokens."""
    compared: int
    """Masked tokens compared (every position of a compared micro-batch is, the others against 0)."""
    uneven: int
    """Windows whose micro-batches on one rank hold unequal numbers of the tokens the bonus acts on: where a mean
    of micro-batch means differs from the window's mean."""
    rows: tuple[BonusRow, ...] = ()
    worst: Token | None = None
    skipped: int = 0
    """Windows not compared: a token within rounding of an entropy threshold makes their count uncertain, or (adaptive
    control) an earlier window's mean entropy within rounding of the target their coefficient."""
    means: dict[int, float] | None = None
    """Under adaptive control, each window's mean entropy over its bonus tokens (None without it)."""


def recorded(record: LossRecord, where: str) -> torch.Tensor:
    """The recorded gradient at a micro-batch's entropies; NotRecomputable when none was recorded."""
    grad = record.entropy_grad
    if grad is None:
        raise NotRecomputable(f"{where}: no gradient at the entropies was recorded (entropy_grad: not recorded, or "
                              f"the loss was not built from the entropies)")  # fmt: skip
    if tuple(grad.shape) != tuple(record.completion_mask.shape):
        raise NotRecomputable(f"{where}: gradient at the entropies of shape {tuple(grad.shape)} for a mask of "
                              f"{tuple(record.completion_mask.shape)}")  # fmt: skip
    return grad.double()


def acting_tokens(records: Sequence[LossRecord], quantile: float) -> tuple[list[torch.Tensor], list[bool]]:
    """(each record's tokens the bonus acts on, whether any of them is uncertain): the mask, or its tokens the
    entropy mask keeps (the threshold over the micro-batch's records on every rank) where `quantile` < 1."""
    masks = entropy_masks(records, quantile)
    acting, uncertain = [], []
    for record, mask in zip(records, masks):
        if mask is None:
            acting.append(record.completion_mask.bool())
            uncertain.append(False)
        else:
            acting.append(mask.kept)
            uncertain.append(bool(mask.uncertain.any()))
    return acting, uncertain


def window_weights(records: Sequence[LossRecord], acting: Sequence[torch.Tensor], coefs: dict[int, float],
                   world: int) -> list[torch.Tensor]:  # fmt: skip
    """dL/dH of each record's tokens: -coef * world / (its window's acting tokens on every rank) where it acts, coef
    its window's (`coefs`)."""
    tokens: dict[int, float] = {}
    for record, act in zip(records, acting):
        tokens[int(record.window)] = tokens.get(int(record.window), 0.0) + float(act.sum())
    return [-coefs[int(r.window)] * world * act.double() / max(tokens[int(r.window)], 1.0)
            for r, act in zip(records, acting)]  # fmt: skip


def uneven_windows(records: Sequence[LossRecord], acting: Sequence[torch.Tensor]) -> int:
    """Windows whose micro-batches on one rank hold unequal numbers of acting tokens."""
    counts: dict[tuple[int, int], set[int]] = {}
    for record, act in zip(records, acting):
        counts.setdefault((int(record.window), int(record.rank)), set()).add(int(act.sum()))
    return len({w for (w, _), seen in counts.items() if len(seen) > 1})


def gaps(records: Sequence[LossRecord], coef: float, world: int = 1, quantile: float = 1.0,
         control: Control | None = None) -> BonusGaps:  # fmt: skip
    """Recorded dL/dH against the formula over every micro-batch of every window (every rank's records together):
    the coefficient `coef`, or each window's under adaptive `control`."""
    if not records:
        raise NotRecomputable("the target recorded no loss inputs")
    labels = [f"window {int(r.window) + 1} micro-batch {i + 1}" for i, r in enumerate(records)]
    got = [recorded(r, label) for r, label in zip(records, labels)]
    acting, uncertain = acting_tokens(records, quantile)
    skip = {int(r.window) for r, u in zip(records, uncertain) if u}
    means = window_means(records, acting) if control is not None else None
    coefs = {int(r.window): coef for r in records}
    if control is not None:
        coefs, unsure = applied(means, control)
        skip |= unsure
    wants = window_weights(records, acting, coefs, world)
    rows = tuple(BonusRow(label, g, w, a, r, coefs[int(r.window)])
                 for label, g, w, a, r in zip(labels, got, wants, acting, records) if int(r.window) not in skip)
    scale = mean_scale([row.want for row in rows], [row.record for row in rows])
    if scale == 0 and control is not None:  # every window holds the bonus off: the size its first coefficient has
        first = window_weights(records, acting, {w: control.initial for w in coefs}, world)
        scale = mean_scale([f for f, r in zip(first, records) if int(r.window) not in skip],
                           [r for r in records if int(r.window) not in skip])  # fmt: skip
    largest, where, worst, compared = 0.0, "", None, 0
    for row in rows:
        relative = relative_gaps(row.got, row.want, torch.ones_like(row.acting), scale)
        gap = float(relative.max()) if relative.numel() else 0.0
        if relative.numel() and (gap > largest or gap != gap or worst is None):
            flat = int(relative.isnan().flatten().nonzero()[0]) if gap != gap else int(relative.argmax())
            b, t = divmod(flat, relative.shape[1])
            worst = Token(row.label, b, t, float(row.got[b, t]), float(row.want[b, t]))
        if gap > largest or gap != gap:
            largest, where = gap, row.label
        compared += int(row.record.completion_mask.sum())
    uneven = uneven_windows([row.record for row in rows], [row.acting for row in rows])
    return BonusGaps(largest, where, scale, compared, uneven, rows, worst, len(skip), means)
