"""GRPO's sampling[ranks=2]: the ranks' completions, read from their loss records, drawn with random streams of their
own (rank_sampling.py; the comparison itself: tests/harness/checks/test_rank_sampling.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from harness.algorithms.grpo.instruments import GRPORecords
from harness.algorithms.grpo.rank_sampling import completions_of, sampling_across_ranks
from harness.instrument.grad_trace import GradTrace
from harness.instrument.loss import LossRecord
from harness.instrument.observe import Ran
from harness.verdict import CheckId, CheckStatus
from tests.support.seeded_alike import assert_sampling_alone_fails, seeded_alike_target

PAD, STOP, VOCAB = 0, 1, 32
CHECK = CheckId("sampling", (("ranks", 2),))


def rank_run(ids: torch.Tensor, rank: int, generation: int = 0) -> Ran:
    """A rank's run whose one loss record holds `ids`, its rows the generation's places in order."""
    rows = len(ids)
    record = LossRecord(generation=generation, window=0, rank=rank, completion_mask=ids != PAD, logps=None,
                        old_logps=None, ref_logps=None, advantages=torch.zeros(rows), entropies=None,
                        completions=torch.arange(rows), completion_ids=ids)  # fmt: skip
    return Ran((), GradTrace(), PAD, STOP, GRPORecords(loss_inputs=(record,), reward_calls=()))


def drawn(generator: torch.Generator, rows: int = 16, length: int = 12) -> torch.Tensor:
    """Completions of uniform tokens other than pad and stop."""
    return torch.randint(2, VOCAB, (rows, length), generator=generator)


def test_each_completion_is_read_once_in_the_order_of_its_places():
    ids = drawn(torch.Generator().manual_seed(0), rows=4)
    first = rank_run(ids, 0)
    (record,) = first.payload.loss_inputs
    again = replace(record, completions=torch.tensor([3, 1]), completion_ids=ids[[3, 1]], window=1)
    shuffled = replace(record, completions=torch.tensor([2, 0, 3, 1]), completion_ids=ids[[2, 0, 3, 1]])
    ran = Ran((), GradTrace(), PAD, STOP, GRPORecords(loss_inputs=(shuffled, again), reward_calls=()))
    assert completions_of(first).keys() == completions_of(ran).keys() == {0}
    assert torch.equal(completions_of(ran)[0], ids) and torch.equal(completions_of(first)[0], ids)


def test_a_rank_without_loss_records_fails_naming_them():
    ids = drawn(torch.Generator().manual_seed(0))
    empty = Ran((), GradTrace(), PAD, STOP, GRPORecords(loss_inputs=(), reward_calls=()))
    result = sampling_across_ranks([rank_run(ids, 0), empty], CHECK)
    assert result.status is CheckStatus.FAIL and "loss records with `completion_ids`" in result.message


def test_independent_streams_pass_and_one_stream_fails():
    one, other = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    passed = sampling_across_ranks([rank_run(drawn(one), 0), rank_run(drawn(other), 1)], CHECK)
    assert passed.status is CheckStatus.PASS, passed.message
    # the same noise on both ranks: most positions agree, a few differ (another prompt's distribution)
    same = drawn(torch.Generator().manual_seed(2))
    moved = same.clone()
    moved[:, ::3] = drawn(torch.Generator().manual_seed(3))[:, ::3]
    failed = sampling_across_ranks([rank_run(same, 0), rank_run(moved, 1)], CHECK)
    assert failed.status is CheckStatus.FAIL and "the same random stream" in failed.message


def test_nothing_to_compare_fails():
    ids = drawn(torch.Generator().manual_seed(0))
    result = sampling_across_ranks([rank_run(ids, 0, generation=0), rank_run(ids, 1, generation=1)], CHECK)
    assert result.status is CheckStatus.FAIL and "no two ranks" in result.message


seeded_alike = seeded_alike_target("harness.algorithms.grpo.targets.reference", "grpo")
"""The reference GRPO trainer with every rank's global random state reset to the run's seed as training starts:
the ranks sample with one random stream (class 87's bug, without its patch)."""


@pytest.mark.dist
@pytest.mark.slow
def test_ranks_seeded_alike_fail_sampling_across_ranks_alone(tmp_path):
    assert_sampling_alone_fails(tmp_path, "tests.harness.algorithms.grpo.test_grpo_rank_sampling:seeded_alike")
