"""sampling[ranks=2]: the ranks' completions drawn with random streams of their own (rank_sampling.py)."""

from __future__ import annotations

import pytest
import torch

from harness.algorithms.grpo.instruments import GRPORecords
from harness.algorithms.grpo.rank_sampling import agreement, sampling_across_ranks
from harness.instrument.grad_trace import GradTrace
from harness.instrument.loss import LossRecord
from harness.instrument.observe import Ran
from harness.verdict import CheckId, CheckStatus
from tests.support.gate_run import verify_dist

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


def test_agreement_counts_the_positions_drawn_in_both_rows():
    a = torch.tensor([[5, 6, STOP, PAD], [7, 8, 9, 10]])
    b = torch.tensor([[5, 9, STOP, PAD], [7, STOP, PAD, PAD]])
    assert agreement(a, b, STOP, PAD) == (3, 5)  # row 1: 5, 6/9, stop; row 2: 7, 8/stop


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


def seeded_alike(spec, accelerator=None):
    """The reference GRPO trainer with the global random state of every rank reset to the run's seed as training
    starts: the ranks sample with one random stream."""
    from transformers import set_seed

    from harness.algorithms.grpo.targets.reference import factory

    run = factory(spec, accelerator)
    train = run.train

    def alike():
        set_seed(spec.seed)
        return train()

    run.train = alike
    return run


seeded_alike.algorithm = "grpo"


@pytest.mark.dist
@pytest.mark.slow
def test_ranks_seeded_alike_fail_sampling_across_ranks_alone(tmp_path):
    code, report, output = verify_dist(tmp_path, "tests.harness.algorithms.grpo.test_grpo_rank_sampling:seeded_alike")
    assert code == 1, output[-3000:]
    checks = {c["id"]: c for c in report["checks"]}
    assert {i for i, c in checks.items() if c["status"] == "fail"} == {"sampling[ranks=2]"}, output[-3000:]
    assert "the same random stream" in checks["sampling[ranks=2]"]["message"]
