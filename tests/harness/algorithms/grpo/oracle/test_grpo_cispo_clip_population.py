"""cispo_clip_population (definitions.py): the tokens cispo's logged clip fraction counts, those capped (r >
epsilon_high) with a positive advantage (trl: _compute_loss's is_cispo_clipped) or every capped token whatever its
advantage's sign (verl: compute_policy_loss_cispo's ratio != clamp(ratio, ...)). The oracle's pooled cispo_clip_ratio
against both written out here; a failing one that the other population reproduces names that profile; the pooling
stays the token mean, so a flat mean of micro-batch means under the declared population is still class 16."""

from __future__ import annotations

import math

import pytest

from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.oracle.expect import Settings, expected_metrics
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.view import IntervalView
from harness.algorithms.grpo.wrong.poolings import candidates
from tests.support.grpo_doubles import record

ANY = VOCABULARY.resolve({"cispo_clip_population": "any_advantage"})
TRL = VOCABULARY.resolve("trl")
SPEC = GRPOSpec(loss_type="cispo", epsilon_high=1.0, beta=0.0)
UP, DOWN = math.log(1.5), math.log(0.5)  # log-ratios: r = 1.5 is capped at 1, r = 0.5 is not
# row 0: A > 0, ratios 1.5, 1.5, 0.5; row 1: A < 0, ratios 1.5, 0.5 (its fourth position masked)
MASK = [[1, 1, 1, 0], [1, 1, 0, 0]]
OLD = [[0.0] * 4] * 2
LOGPS = [[UP, UP, DOWN, UP], [UP, DOWN, UP, UP]]


def made(rows=slice(None)):
    return record(MASK[rows], LOGPS[rows], [1.0, -1.0][rows], old=OLD[rows])


def test_the_clip_fraction_counts_the_declared_population():
    assert expected_metrics([made()], SPEC, TRL)["cispo_clip_ratio"].value == pytest.approx(2 / 5, rel=1e-12)
    assert expected_metrics([made()], SPEC, ANY)["cispo_clip_ratio"].value == pytest.approx(3 / 5, rel=1e-12)


def test_only_the_cispo_clip_ratio_reads_it():
    trl, any_ = expected_metrics([made()], SPEC, TRL), expected_metrics([made()], SPEC, ANY)
    assert [n for n in trl if trl[n].value != any_[n].value] == ["cispo_clip_ratio"]


def test_no_micro_batch_cut_moves_it():
    whole = expected_metrics([made()], SPEC, ANY)["cispo_clip_ratio"].value
    cut = expected_metrics([made(slice(0, 1)), made(slice(1, 2))], SPEC, ANY)["cispo_clip_ratio"].value
    assert cut == pytest.approx(whole, rel=1e-12)


def test_the_other_population_is_a_candidate_by_name_and_the_flat_mean_stays_class_16():
    cut = (made(slice(0, 1)), made(slice(1, 2)))
    interval = IntervalView(0, cut, Settings.of(SPEC, ANY))
    found = {c.formula: (c.classes, c.value) for c in candidates(interval, "cispo_clip_ratio")}
    (trl,) = [v for f, v in found.items() if f.startswith("cispo_clip_population positive_advantage (the trl")]
    assert trl[1] == pytest.approx(2 / 5, rel=1e-12)
    (flat,) = [v for f, v in found.items() if f.startswith("flat mean of per-micro-batch token means")]
    assert flat == ((16,), pytest.approx((2 / 3 + 1 / 2) / 2, rel=1e-12))  # each micro-batch's own mean, averaged
