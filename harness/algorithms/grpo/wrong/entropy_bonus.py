"""Known wrong forms of the entropy bonus's gradient: which one reproduces what the target recorded at the entropies.

`entropy_gradient` (scenarios/entropy.py) compares each token's recorded dL/dH with the window mean's
(oracle/entropy_bonus.py). When that fails, the form here is recomputed over the same micro-batches and is named only
when it reproduces the recorded gradient at every compared position within the check's own tolerance:

    each micro-batch's own mean   -coef / (the micro-batch's acting tokens * the window's micro-batches on its rank):
                                  the bonus a mean of micro-batch means, each divided by the accumulation steps
                                  (TRL's `_compute_loss`, 1.12.0 and 1.16.0)                          (class 82)

    the rank's own count          -coef * world / (the window's acting tokens on its rank): the count never
                                  reduced over the ranks, each rank's bonus its own tokens' mean   (class 95)

Under adaptive entropy control (oracle/adaptive_entropy.py), with each window's coefficient wrong (class 98):

    the control off               entropy_coef at every window, never gated nor moved
    the gate ignored              the coefficient applied whatever the last window's mean entropy (from the
                                  first step on)
    moved before it applies       each window's coefficient moved, and gated, by its own mean before its step
    moved before the last         the last micro-batch of each window applying the coefficient so moved, the others
                                  the last step's (TRL PR 6140's first form)

The first two equal the window mean's exactly where every micro-batch of a window holds as many acting tokens on one
rank, and on one process; a form never changes a verdict, it names it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from harness.report.format import fmt
from harness.tolerances import tolerance
from harness.verdict import Diagnosis

from ..oracle.adaptive_entropy import Control, applied
from ..oracle.entropy_bonus import METRIC, BonusGaps, BonusRow, window_weights
from ..oracle.gradients import mean_scale, relative_gaps
from ..tolerances import TOLERANCES
from . import gradient_formulas

SOURCE = "loss records"
MICRO_BATCH_MEAN = 82
"""docs/bug-catalogue.md: the entropy bonus as each micro-batch's own mean."""
RANK_COUNT = 95
"""docs/bug-catalogue.md: the entropy bonus counted on its own rank."""
ADAPTIVE = 98
"""docs/bug-catalogue.md: adaptive entropy control wrong."""


def micro_batch_means(rows: Sequence[BonusRow]) -> list[torch.Tensor]:
    """dL/dH of each micro-batch under TRL's bonus: its window's coefficient times its own mean entropy, over the
    window's micro-batches on its rank (the local gradient: data parallelism's mean over the ranks is outside it)."""
    counts: dict[tuple[int, int], int] = {}
    for row in rows:
        key = (int(row.record.window), int(row.record.rank))
        counts[key] = counts.get(key, 0) + 1
    return [-row.coef * row.acting.double() / (max(float(row.acting.sum()), 1.0)
                                           * counts[(int(row.record.window), int(row.record.rank))])
            for row in rows]  # fmt: skip


def rank_counts(rows: Sequence[BonusRow]) -> list[torch.Tensor]:
    """dL/dH of each micro-batch with the window's count taken on its own rank: -coef * world / (the acting tokens
    of the window's micro-batches on that rank) where the bonus acts, 0 elsewhere, coef its window's."""
    world = len({int(row.record.rank) for row in rows}) or 1
    tokens: dict[tuple[int, int], float] = {}
    for row in rows:
        key = (int(row.record.window), int(row.record.rank))
        tokens[key] = tokens.get(key, 0.0) + float(row.acting.sum())
    return [-row.coef * world * row.acting.double() / max(tokens[(int(row.record.window), int(row.record.rank))], 1.0)
            for row in rows]  # fmt: skip


FORMS = (
    (MICRO_BATCH_MEAN, micro_batch_means, "each micro-batch's own mean entropy divided by the window's micro-batches "
     "(TRL's per-micro-batch bonus)"),
    (RANK_COUNT, rank_counts, "the window's mean entropy over this rank's tokens alone (the count not reduced over "
     "the ranks)"),
)
"""(class, the form's dL/dH of every row, its words), in the order they are tried."""


def worded(gap: BonusGaps, dtype: str) -> str:
    """What the largest gap compared, in words (gradient_formulas.py's wording, at the entropies)."""
    return gradient_formulas.worded(gap, dtype, METRIC, "dL/dH", "the window mean's")


def adaptive_forms(gap: BonusGaps, control: Control | None) -> list[tuple[int, object, str]]:
    """Class 98's forms (module docstring) where the run has adaptive control, each as FORMS' are."""
    if control is None or gap.means is None:
        return []
    records = [r.record for r in gap.rows]
    world = len({int(r.rank) for r in records}) or 1

    def form(coefs: dict[int, float]):
        return lambda rows: window_weights(records, [r.acting for r in rows], coefs, world)

    def last_moved(rows):  # the last micro-batch of each window on its rank under the early control, the rest as is
        early = form(applied(gap.means, control, lag=False)[0])(rows)
        last = {(int(r.record.window), int(r.record.rank)): i for i, r in enumerate(rows)}
        return [e if last[(int(r.record.window), int(r.record.rank))] == i else r.want
                for i, (r, e) in enumerate(zip(rows, early))]  # fmt: skip

    variants = ((f"entropy_coef {fmt(control.initial)} at every window (the adaptive control off)",
                 form({w: control.initial for w in gap.means})),
                ("the coefficient applied from the first step whatever the last window's mean entropy (the gate "
                 "ignored)", form(applied(gap.means, control, gate=False)[0])),
                ("each window's coefficient moved and gated by its own mean entropy before its step",
                 form(applied(gap.means, control, lag=False)[0])),
                ("the last micro-batch of each window applying the coefficient already moved and gated by the "
                 "window's mean entropy (the others the last step's)", last_moved))  # fmt: skip
    return [(ADAPTIVE, f, words) for words, f in variants]


def diagnose(gap: BonusGaps, dtype: str, control: Control | None = None) -> tuple[Diagnosis | None, str]:
    """(the known wrong form that reproduces the recorded gradient, '') or (None, why there is none)."""
    rows = gap.rows
    if not rows or not all(torch.isfinite(r.got).all() for r in rows):
        return None, ""
    allowed = tolerance(METRIC, dtype, TOLERANCES).allowed(0.0, 1.0)
    for number, form, words in (*FORMS, *adaptive_forms(gap, control)):
        wants = form(rows)
        scale = mean_scale(wants, [r.record for r in rows]) or gap.scale
        largest = max(float(relative_gaps(r.got, w, torch.ones_like(r.acting), scale).max())
                      for r, w in zip(rows, wants))  # fmt: skip
        if largest <= allowed:
            return Diagnosis((number,), f"{words}, every token within {fmt(largest)}", math.nan, math.nan, SOURCE), ""
    return None, "no known wrong form of the bonus reproduces the recorded gradient"
