"""Entropies and log-probs recomputed from logits holding -inf (a masked vocabulary entry, as top-k or top-p
sampling or a logits processor leaves it): the spy's `reduce_logits` and `LogitGaps`'s float64 formulas
(logits.py) give the same values, finite where the row has a finite logit."""

from __future__ import annotations

import math

import torch

from harness.instrument.logits import LogitGaps, entropy_f64, logps_f64
from harness.instrument.tensors import reduce_logits

INF = float("inf")


def masked_logits() -> tuple[torch.Tensor, torch.Tensor]:
    """(2, 3, 40) logits with 30 entries of each row at -inf (a different 30 per row), and a finite token per row."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 40, generator=gen)
    kept = torch.rand(2, 3, 40, generator=gen).argsort(dim=-1)[..., :10]
    masked = torch.full_like(logits, -INF).scatter(-1, kept, logits.gather(-1, kept))
    return masked, kept[..., 0]


def test_a_masked_entry_adds_nothing_to_the_entropy_in_both_recomputations():
    logits, index = masked_logits()
    spied, _, _ = reduce_logits(logits)
    recomputed = entropy_f64(logits.reshape(-1, 40)).reshape(2, 3)
    kept = logits[logits > -INF].reshape(2, 3, 10)
    assert torch.isfinite(recomputed).all() and torch.allclose(recomputed, spied, rtol=0, atol=1e-12)
    assert torch.allclose(recomputed, reduce_logits(kept)[0], rtol=0, atol=1e-12)  # as if the entries were absent
    logps = logps_f64(logits.reshape(-1, 40), index.reshape(-1)).reshape(2, 3)
    assert torch.isfinite(logps).all()
    assert float(reduce_logits(logits, index, logps)[1].max()) < 1e-12  # the spy's log-probs are the same


def test_rows_with_no_finite_largest_logit_agree():
    rows = torch.tensor([[-INF, -INF, -INF], [0.0, INF, 1.0], [0.0, math.nan, 1.0], [0.0, -INF, 1.0]])
    want = [-INF, INF, math.nan, None]
    for got in (entropy_f64(rows), reduce_logits(rows)[0]):
        for g, w in zip(got.tolist(), want):
            assert (math.isnan(g) if w != w else g == w) if w is not None else math.isfinite(g)


def test_logit_gaps_of_a_right_trainer_on_masked_logits_are_finite_and_small():
    """A trainer whose entropy is right on masked rows (its 0 * -inf terms taken as 0) keeps gaps near 0 (the
    earlier `-(p * log p).sum()` recomputation gave NaN there, a NaN gap that `_keep` now keeps)."""
    logits, index = masked_logits()

    def log_softmax(lg, ix):
        return torch.log_softmax(lg.float(), dim=-1).gather(-1, ix.unsqueeze(-1)).squeeze(-1)

    def entropy(lg):
        p = torch.softmax(lg.float(), dim=-1)
        return -(p * torch.log_softmax(lg.float(), dim=-1)).nan_to_num(nan=0.0).sum(dim=-1)

    gaps = LogitGaps()
    wrapped_logps, wrapped_entropy = gaps.wrap(log_softmax, entropy)
    wrapped_logps(logits, index)
    wrapped_entropy(logits)
    assert gaps.logps is not None and gaps.logps < 1e-5
    assert gaps.entropies is not None and gaps.entropies < 1e-5


def test_a_nan_gap_is_kept_whatever_came_before():
    """`max(0.0, nan)` is 0.0: a trainer returning NaN entropies kept a gap of 0 and passed."""
    logits, index = masked_logits()
    rows = logits.reshape(-1, 40)[:, :5].abs()  # finite rows
    gaps = LogitGaps()
    _, wrapped_entropy = gaps.wrap(lambda lg, ix: lg, lambda lg: torch.full(lg.shape[:-1], math.nan))
    wrapped_entropy(rows)
    assert math.isnan(gaps.entropies)
    _, right = gaps.wrap(lambda lg, ix: lg, lambda lg: entropy_f64(lg))
    right(rows)  # a later right call keeps the NaN
    assert math.isnan(gaps.entropies)
