"""entropy_pass (definitions.py): the forward pass whose per-token entropies the logged entropy pools, the update's own
(trl: _compute_loss logs global_masked_mean of the entropies of its own forward) or the one that computed the old
log-probs, before the update (verl: RayPPOTrainer.fit logs agg_loss of _compute_old_log_prob's entropies). The
oracle's pooled entropy against both written out here in float64; the records' `old_entropies` hold the second pass,
and where they hold none the entropy is not recomputable, never passed. The aggregate stays the token mean either
way: verl's entropy aggregated with the loss's loss_agg_mode is a candidate of the diagnosis (a finding), never the
expectation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.oracle.expect import Settings, expected_metrics
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.view import IntervalView
from harness.algorithms.grpo.wrong.poolings import candidates
from tests.support.grpo_doubles import record

BEFORE = VOCABULARY.resolve({"entropy_pass": "before_update"})
TRL = VOCABULARY.resolve("trl")
MASK = [[1, 1, 1, 0], [1, 0, 0, 0]]
UPDATE_H = [[0.5, 1.0, 1.5, 9.0], [2.0, 9.0, 9.0, 9.0]]
BEFORE_H = [[0.25, 0.75, 2.0, 9.0], [3.0, 9.0, 9.0, 9.0]]


def made(before=BEFORE_H, rows=slice(None)):
    r = record([m for m in MASK][rows], [[-1.0] * 4] * len(MASK[rows]), [1.0, -1.0][rows], entropies=UPDATE_H[rows])
    old = None if before is None else torch.tensor(before, dtype=torch.float64)[rows]
    return dataclasses.replace(r, old_entropies=old)


def token_mean(values) -> float:
    mask = torch.tensor(MASK, dtype=torch.float64)
    return float((torch.tensor(values) * mask).sum() / mask.sum())


def test_the_entropy_is_the_token_mean_of_the_declared_pass():
    spec = GRPOSpec(loss_type="dapo", beta=0.0)
    assert expected_metrics([made()], spec, TRL)["entropy"].value == pytest.approx(token_mean(UPDATE_H), rel=1e-12)
    assert expected_metrics([made()], spec, BEFORE)["entropy"].value == pytest.approx(token_mean(BEFORE_H), rel=1e-12)
    assert abs(token_mean(UPDATE_H) - token_mean(BEFORE_H)) > 1e-2  # the two passes differ here


def test_without_the_old_pass_recorded_the_entropy_is_not_recomputable():
    expected = expected_metrics([made(before=None)], GRPOSpec(loss_type="dapo", beta=0.0), BEFORE)["entropy"]
    assert expected.value is None and "old_entropies" in expected.reason


def test_no_micro_batch_cut_moves_it():
    """The rows cut into two micro-batches of unequal tokens pool to the same entropy (a systems knob changes
    nothing), under either pass."""
    spec = GRPOSpec(loss_type="grpo", beta=0.0)
    for declared in (TRL, BEFORE):
        whole = expected_metrics([made()], spec, declared)["entropy"].value
        cut = expected_metrics([made(rows=slice(0, 1)), made(rows=slice(1, 2))], spec, declared)["entropy"].value
        assert cut == pytest.approx(whole, rel=1e-12)


def test_only_the_entropy_reads_it():
    spec = GRPOSpec(loss_type="grpo", beta=0.0)
    trl, before = expected_metrics([made()], spec, TRL), expected_metrics([made()], spec, BEFORE)
    assert [n for n in trl if trl[n].value != before[n].value] == ["entropy"]


def test_a_failing_entropy_of_the_other_pass_and_the_loss_aggregate_are_candidates_by_name():
    """Declared before_update, the update's token mean is the trl profile's value; the completions' mean of token
    means (grpo's aggregate, verl's agg_loss under seq-mean-token-mean) is the finding's formula."""
    interval = IntervalView(0, (made(),), Settings.of(GRPOSpec(loss_type="grpo", beta=0.0), BEFORE))
    found = {c.formula: c.value for c in candidates(interval, "entropy")}
    (trl,) = [v for f, v in found.items() if f.startswith("entropy_pass update (the trl profile's)")]
    assert trl == pytest.approx(token_mean(UPDATE_H), rel=1e-12)
    (as_loss,) = [v for f, v in found.items() if "verl issue 3986" in f]
    assert as_loss == pytest.approx(((0.25 + 0.75 + 2.0) / 3 + 3.0) / 2, rel=1e-12)
