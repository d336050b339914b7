"""The reference GRPO trainer counts a completion as truncated as TRL does, when its mask holds no stop token (the
contract's truncation): declaring verl's, every completion of max_completion_length tokens, on it fails the logged
clipped ratio and names the trl profile as what its number is; every other length statistic passes as before."""

from __future__ import annotations

from harness.algorithms.grpo.definitions import AT_LIMIT, NO_STOP
from harness.algorithms.grpo.oracle.lengths import Completion, length_stats
from tests.harness.algorithms.grpo.scenarios.test_grpo_declared_loss_gate import formula, judged

CHECK = "completion_lengths"
CLIPPED = "completions/clipped_ratio"


def test_the_two_truncations_by_hand():
    """Four completions with a cap of 3: one ended before it, one ended with the stop token at it, one ran to it
    without, one is empty; no_stop counts the last two (2 of 4), at_limit the two of 3 tokens."""
    shapes = ((2, True), (3, True), (3, False), (0, False))
    rows = [Completion(0, 0, i, length, ended) for i, (length, ended) in enumerate(shapes)]
    assert length_stats(rows, 3, NO_STOP)[CLIPPED].value == 2 / 4
    assert length_stats(rows, 3, AT_LIMIT)[CLIPPED].value == 2 / 4
    assert length_stats(rows[:3], 3, NO_STOP)[CLIPPED].value == 1 / 3  # the empty one left out
    assert length_stats(rows[:3], 3, AT_LIMIT)[CLIPPED].value == 2 / 3


def test_verls_truncation_declared_on_a_trainer_that_counts_the_stop_token_fails_by_name():
    assert judged(CHECK, "trl").passed
    result = judged(CHECK, {"truncation": AT_LIMIT})
    assert {m.name for m in result.metrics if m.failed} == {CLIPPED}
    assert formula(result, CLIPPED).startswith("truncation no_stop (the trl profile's), where the target declares "
                                               "truncation at_limit")  # fmt: skip
