"""metric_pooling (definitions.py): how the logged kl and policy_loss pool an interval's optimizer steps, once over
every token of the interval (trl, the contract) or as the mean over its windows of each window's own aggregate (verl:
TrainingWorker.train_mini_batch appends each mini-batch's kl_loss and pg_loss, reduce_metrics takes their mean). The
oracle's pooled values against both written out here in float64, on an interval of two windows of unequal tokens."""

from __future__ import annotations

import pytest
import torch

from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.oracle.expect import expected_metrics
from harness.algorithms.grpo.spec import GRPOSpec
from tests.support.grpo_doubles import record

BETA = 0.04
WINDOW_MEAN = VOCABULARY.resolve({"metric_pooling": "window_mean"})
TRL = VOCABULARY.resolve("trl")


def interval():
    """Window 0: two micro-batches (3 + 1 tokens); window 1: one micro-batch of 5 tokens; ratios 1, k3 > 0."""
    first = record([[1, 1, 1]], [[-1.0, -0.5, -2.0]], [1.0], ref=[[-0.8, -0.9, -1.0]], window=0)
    second = record([[1, 0, 0]], [[-0.3, -1.0, -1.0]], [-0.5], ref=[[-1.3, -1.0, -1.0]], window=0)
    third = record([[1, 1, 1, 1, 1]], [[-1.0, -0.2, -0.4, -2.0, -0.1]], [0.25],
                   ref=[[-1.1, -0.6, -0.4, -1.0, -0.3]], window=1)  # fmt: skip
    return [first, second, third]


def per_token(r) -> tuple[torch.Tensor, torch.Tensor]:
    """(-A, k3) per token at ratio 1 (neither clipped nor weighted away from k3), float64."""
    gap = r.ref_logps - r.logps
    return -r.advantages.unsqueeze(1).expand_as(gap), torch.exp(gap) - gap - 1


def token_mean(records, which: int) -> float:
    total = sum(float((per_token(r)[which] * r.completion_mask).sum()) for r in records)
    return total / sum(int(r.completion_mask.sum()) for r in records)


@pytest.mark.parametrize("metric, which", [("kl", 1), ("policy_loss", 0)])
def test_dapos_kl_and_policy_loss_are_the_intervals_token_mean_or_the_mean_of_its_windows(metric, which):
    records = interval()
    spec = GRPOSpec(loss_type="dapo", beta=BETA)
    excluded = {"policy_loss_includes_kl": False}
    trl = expected_metrics(records, spec, VOCABULARY.resolve(excluded))[metric].value
    windows = expected_metrics(records, spec, VOCABULARY.resolve({**excluded, "metric_pooling": "window_mean"}))
    whole = token_mean(records, which)
    mean_of_windows = (token_mean(records[:2], which) + token_mean(records[2:], which)) / 2
    assert trl == pytest.approx(whole, rel=1e-12)
    assert windows[metric].value == pytest.approx(mean_of_windows, rel=1e-12)
    assert abs(whole - mean_of_windows) > 1e-3  # the two poolings differ here


def test_one_window_per_interval_pools_the_same_either_way():
    records = [r for r in interval() if r.window == 0]
    spec = GRPOSpec(loss_type="dapo", beta=BETA)
    trl, windows = expected_metrics(records, spec, TRL), expected_metrics(records, spec, WINDOW_MEAN)
    assert {n: e.value for n, e in trl.items()} == {n: e.value for n, e in windows.items()}


def test_the_clip_fractions_and_the_entropy_are_pooled_over_the_interval_whatever_the_entry():
    records, spec = interval(), GRPOSpec(loss_type="dapo", beta=BETA)
    trl, windows = expected_metrics(records, spec, TRL), expected_metrics(records, spec, WINDOW_MEAN)
    assert [n for n in trl if trl[n].value != windows[n].value] == ["kl", "policy_loss"]
