"""Class 19's token-weighted form (wrong/poolings.py, `window_shares_by_tokens`): a trainer that logs each
micro-batch's share of its optimizer window's loss (times the window's micro-batches) and averages the shares
weighted by tokens, as OpenRLHF 0.11.2's training_step and ppo_train do. Written out here for one window of two
micro-batches of 3 and 1 tokens; the diagnosis names it, and it is the token mean where the micro-batches hold as many
tokens (then nothing fails)."""

from __future__ import annotations

import pytest

from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.oracle.expect import Settings
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.view import IntervalView
from harness.algorithms.grpo.wrong.poolings import candidates, window_shares_by_tokens
from tests.support.grpo_doubles import record

SPEC = GRPOSpec(loss_type="dapo", beta=0.0)
TRL = VOCABULARY.resolve("trl")


def window(second_tokens: int = 1):
    """Two micro-batches of one window, at ratio 1: 3 tokens of entropy 1, 2, 3 and advantage 1 (loss -1 each), and
    `second_tokens` tokens of entropy 5 and advantage -1 (loss +1 each)."""
    first = record([[1, 1, 1]], [[-1.0] * 3], [1.0], old=[[-1.0] * 3], entropies=[[1.0, 2.0, 3.0]])
    mask = [[1] * second_tokens + [0] * (3 - second_tokens)]
    second = record(mask, [[-1.0] * 3], [-1.0], old=[[-1.0] * 3], entropies=[[5.0] * 3])
    return IntervalView(0, (first, second), Settings.of(SPEC, TRL))


def test_the_shares_weighted_by_tokens_written_out():
    interval = window()
    # shares: (1 + 2 + 3) / 4 tokens * 2 micro-batches = 3 and 5 / 4 * 2 = 2.5, weighted by 3 and 1 tokens
    assert window_shares_by_tokens(interval.terms, interval.settings, "entropy") == pytest.approx((3 * 3 + 2.5) / 4)
    # policy_loss: -3 / 4 * 2 = -1.5 and 1 / 4 * 2 = 0.5, weighted: -1, where the token mean is -0.5
    assert window_shares_by_tokens(interval.terms, interval.settings, "policy_loss") == pytest.approx(-1.0)


def test_the_diagnosis_names_class_19():
    found = [c for c in candidates(window(), "entropy") if c.classes == (19,)]
    assert len(found) == 1 and found[0].value == pytest.approx(2.875)
    assert [c.value for c in candidates(window(), "policy_loss") if c.classes == (19,)] == [pytest.approx(-1.0)]


def test_micro_batches_of_as_many_tokens_give_the_token_mean():
    interval = window(second_tokens=3)
    assert window_shares_by_tokens(interval.terms, interval.settings, "entropy") == pytest.approx((6 + 15) / 6)
    assert window_shares_by_tokens(interval.terms, interval.settings, "policy_loss") == pytest.approx(0.0)
