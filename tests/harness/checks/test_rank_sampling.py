"""`sampling[ranks=N]`: the ranks' completions drawn with random streams of their own (harness/checks/rank_sampling.py),
on completions given as each rank's generation -> ids, as an algorithm's module hands them over."""

from __future__ import annotations

import re

import pytest
import torch

from harness.checks.rank_sampling import BOUND, agreement, pair_counts, sampling_across_ranks
from harness.verdict import CheckId, CheckStatus

PAD, STOP, VOCAB = 0, 1, 32
CHECK = CheckId("sampling", (("ranks", 2),))
SOURCE = "the test's records"


def drawn(seed: int, rows: int = 16, length: int = 12) -> torch.Tensor:
    """Completions of uniform tokens other than pad and stop, from a stream seeded with `seed`."""
    return torch.randint(2, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


def judged(*ranks: dict[int, torch.Tensor], stop: int | None = STOP):
    return sampling_across_ranks(list(ranks), stop, PAD, CheckId("sampling", (("ranks", len(ranks)),)), SOURCE)


def z_of(message: str) -> float:
    return float(re.search(r"Z (-?[\d.]+)", message).group(1))


def test_agreement_counts_the_positions_drawn_in_both_rows():
    a = torch.tensor([[5, 6, STOP, PAD], [7, 8, 9, 10]])
    b = torch.tensor([[5, 9, STOP, PAD], [7, STOP, PAD, PAD]])
    assert agreement(a, b, STOP, PAD) == (3, 5)  # row 1: 5, 6/9, stop; row 2: 7, 8/stop
    assert agreement(a, b[:, :2], STOP, PAD) == (2, 4)  # only the width both rows have


def test_independent_streams_pass_with_a_small_z():
    for seed in range(5):
        result = judged({0: drawn(2 * seed), 1: drawn(100 + seed)}, {0: drawn(2 * seed + 1), 1: drawn(200 + seed)})
        assert result.status is CheckStatus.PASS, result.message
        assert abs(z_of(result.message)) < 3 and f"<= {BOUND:g}" in result.message


def test_one_stream_on_both_ranks_fails_with_z_above_the_bound():
    # the same noise on both ranks: most positions agree, every third drawn from another prompt's distribution
    same = drawn(2)
    moved = same.clone()
    moved[:, ::3] = drawn(3)[:, ::3]
    result = judged({0: same}, {0: moved})
    assert result.status is CheckStatus.FAIL and "the same random stream" in result.message
    assert z_of(result.message) > BOUND
    agreed, compared, expected, _ = pair_counts({0: same}, {0: moved}, STOP, PAD)
    assert compared == 16 * 12 and agreed >= 16 * 8 and expected < 0.1 * compared


def test_the_worst_pair_of_three_ranks_is_named():
    result = judged({0: drawn(0)}, {0: drawn(1)}, {0: drawn(1)})
    assert result.status is CheckStatus.FAIL and "ranks 1 and 2" in result.message


def test_fewer_agreements_than_chance_pass():
    ids = drawn(4)
    other = (ids - 2 + 1) % (VOCAB - 2) + 2  # never the same token at a position, often at a shifted one
    result = judged({0: ids}, {0: other})
    assert result.status is CheckStatus.PASS and z_of(result.message) < 0


@pytest.mark.parametrize(
    "ranks, said",
    [
        (({0: drawn(0)}, {}), f"a rank recorded no completion ids ({SOURCE})"),
        (({0: drawn(0)}, {1: drawn(1)}), "no two ranks drew"),  # no generation in common
        (({0: drawn(0, rows=1)}, {0: drawn(1, rows=1)}), "no two ranks drew"),  # one completion: no shift
        (({0: drawn(0, length=0)}, {0: drawn(1, length=0)}), "no two ranks drew"),  # no position at all
        (({0: drawn(0)},), "no two ranks drew"),  # one rank
    ],
    ids=["a rank without completions", "no generation in common", "one completion", "no position", "one rank"],
)
def test_nothing_to_compare_fails_saying_so(ranks, said):
    result = judged(*ranks)
    assert result.status is CheckStatus.FAIL and said in result.message, result.message


def test_positions_after_the_stop_token_are_not_compared():
    ids = drawn(5)
    ids[:, 0] = STOP  # every completion stops at its first token: that token is all that was drawn
    other = drawn(6)
    other[:, 0] = STOP
    agreed, compared, _, _ = pair_counts({0: ids}, {0: other}, STOP, PAD)
    assert (agreed, compared) == (16, 16)
    assert pair_counts({0: ids}, {0: other}, None, PAD)[1] == 16 * 12  # without a stop token every position counts
