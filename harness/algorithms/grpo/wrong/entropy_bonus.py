"""Known wrong forms of the entropy bonus's gradient: which one reproduces what the target recorded at the entropies.

`entropy_gradient` (scenarios/entropy.py) compares each token's recorded dL/dH with the window mean's
(oracle/entropy_bonus.py). When that fails, the form here is recomputed over the same micro-batches and is named only
when it reproduces the recorded gradient at every compared position within the check's own tolerance:

    each micro-batch's own mean   -coef / (the micro-batch's acting tokens * the window's micro-batches on its rank):
                                  the bonus a mean of micro-batch means, each divided by the accumulation steps
                                  (TRL's `_compute_loss`, 1.12.0 and 1.16.0)                          (class 82)

    the rank's own count          -coef * world / (the window's acting tokens on its rank): the count never
                                  reduced over the ranks, each rank's bonus its own tokens' mean   (class 95)

The first equals the window mean's exactly where every micro-batch of a window holds as many acting tokens on one
rank, the second on one process; a form never changes a verdict, it names it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from harness.report.format import fmt
from harness.tolerances import tolerance
from harness.verdict import Diagnosis

from ..oracle.entropy_bonus import METRIC, BonusGaps, BonusRow
from ..oracle.gradients import mean_scale, relative_gaps
from ..tolerances import TOLERANCES
from . import gradient_formulas

SOURCE = "loss records"
MICRO_BATCH_MEAN = 82
"""docs/bug-catalogue.md: the entropy bonus as each micro-batch's own mean."""
RANK_COUNT = 95
"""docs/bug-catalogue.md: the entropy bonus counted on its own rank."""


def micro_batch_means(rows: Sequence[BonusRow], coef: float) -> list[torch.Tensor]:
    """dL/dH of each micro-batch under TRL's bonus: coef times its own mean entropy, over the window's micro-batches
    on its rank (the local gradient: data parallelism's mean over the ranks is outside it)."""
    counts: dict[tuple[int, int], int] = {}
    for row in rows:
        key = (int(row.record.window), int(row.record.rank))
        counts[key] = counts.get(key, 0) + 1
    return [-coef * row.acting.double() / (max(float(row.acting.sum()), 1.0)
                                           * counts[(int(row.record.window), int(row.record.rank))])
            for row in rows]  # fmt: skip


def rank_counts(rows: Sequence[BonusRow], coef: float) -> list[torch.Tensor]:
    """dL/dH of each micro-batch with the window's count taken on its own rank: -coef * world / (the acting tokens
    of the window's micro-batches on that rank) where the bonus acts, 0 elsewhere."""
    world = len({int(row.record.rank) for row in rows}) or 1
    tokens: dict[tuple[int, int], float] = {}
    for row in rows:
        key = (int(row.record.window), int(row.record.rank))
        tokens[key] = tokens.get(key, 0.0) + float(row.acting.sum())
    return [-coef * world * row.acting.double() / max(tokens[(int(row.record.window), int(row.record.rank))], 1.0)
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


def diagnose(gap: BonusGaps, coef: float, dtype: str) -> tuple[Diagnosis | None, str]:
    """(the known wrong form that reproduces the recorded gradient, '') or (None, why there is none)."""
    rows = gap.rows
    if not rows or not all(torch.isfinite(r.got).all() for r in rows):
        return None, ""
    allowed = tolerance(METRIC, dtype, TOLERANCES).allowed(0.0, 1.0)
    for number, form, words in FORMS:
        wants = form(rows, coef)
        scale = mean_scale(wants, [r.record for r in rows])
        largest = max(float(relative_gaps(r.got, w, torch.ones_like(r.acting), scale).max())
                      for r, w in zip(rows, wants))  # fmt: skip
        if largest <= allowed:
            return Diagnosis((number,), f"{words}, every token within {fmt(largest)}", math.nan, math.nan, SOURCE), ""
    return None, "no known wrong form of the bonus reproduces the recorded gradient"
