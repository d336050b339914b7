"""The reference GRPO trainer logs kl and policy_loss pooled once over each interval's tokens (the contract's
metric_pooling): declaring verl's, the mean over an interval's optimizer windows of each window's own aggregate, on it
fails the pooled kl where an interval's windows hold different token counts, and dapo's policy_loss too, names the trl
profile as what its numbers are, and passes with TRL's value. A seq-mean policy_loss (grpo) over windows of as many
completions is the same number either way."""

from __future__ import annotations

import pytest

from tests.harness.algorithms.grpo.scenarios.test_grpo_declared_loss_gate import formula, judged

WINDOW_MEAN = {"metric_pooling": "window_mean"}
NAMED = "metric_pooling interval (the trl profile's), where the target declares metric_pooling window_mean"


@pytest.mark.parametrize("check_id, metrics", [("uneven_lengths[loss_type=dapo]", ("kl", "policy_loss")),
                                               ("uneven_lengths[loss_type=grpo]", ("kl",))])  # fmt: skip
def test_window_pooling_declared_on_a_trainer_pooling_the_interval_fails_and_names_the_trl_profile(check_id, metrics):
    assert judged(check_id, "trl").passed
    result = judged(check_id, WINDOW_MEAN)
    for metric in metrics:
        assert formula(result, metric).startswith(NAMED)
    assert {m.name for m in result.metrics if m.failed} == set(metrics)


def test_one_window_per_interval_changes_nothing():
    assert judged("no_kl", WINDOW_MEAN).passed  # one micro-batch, one window per interval
