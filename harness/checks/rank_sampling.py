"""`sampling[ranks=N]` of verify-dist: the ranks' random streams are their own (any algorithm's ranks).

On one process `sampling` holds the drawn tokens to the policy network's distribution; it cannot see whether two
ranks drew with the same noise. A trainer that seeds every rank alike (the same seed, and nothing of the rank
added) gives every rank the same random stream. Where two ranks sample one prompt their completions are copies of
each other; where they sample different prompts, the k-th completion of each rank is drawn with the same noise at
every position, and a policy whose distributions are close to uniform (the toy world's) mostly picks the same token
with the same noise.

What is compared, from each rank's drawn completions alone (an algorithm's module reads them from what its ranks
record: for each generation, the ids of each completion once, in the order the rank drew them): for each pair of
ranks and each generation, rank a's k-th completion with rank b's k-th ("aligned"), and with rank b's (k + s)-th
for every other shift s ("shifted"), counting the positions drawn in both (up to and including the first stop
token or pad, harness/checks/sampling.py) and those whose tokens agree. Drawn independently, every pairing agrees at
a position with the same chance, sum_v p(v) q(v) for the two positions' distributions p and q: the aligned pairing
is one of the N shifts and no other's equal. The shifted pairings give that chance r (with one agreement and one
disagreement added, so that it is never 0 or 1); over the aligned pairs' n compared positions the agreements are
then about binomial(n, r), and

    Z = (aligned agreements - n r) / sqrt(n r (1 - r))

over every generation of a pair of ranks (the sums of each generation's n, n r and n r (1 - r)) fails above
BOUND. On the toy world (a vocabulary of 32 tokens, completions of up to 12, the policy's logits small) r is 0.03
to 0.05 (1/32 = 0.031 for a uniform policy, more where the stop token and pad are likelier), and the two-rank
runs verify-dist reads hold n of 92 to 246 aligned positions over their two generations at seeds 0-4 (3.5 to 8.7
agreements expected): a Z of 5 is some 9 to 15 agreements above that. The reference trainers, seeded apart, give Z
of -1.9 to 0.8 there; seeded alike, their ranks agree at 26 to 49 % of those positions, Z 19 to 39 (each
algorithm's module gives its own run's numbers). Only agreement above chance fails (fewer agreements than chance is
no shared stream). A run in which no pair of ranks has a position drawn in both fails: it shows nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations

import torch

from harness.verdict import Check, CheckId, CheckResult

from .sampling import drawn_positions

BOUND = 5.0
"""The largest Z of aligned agreements a run of independent streams may show (as `sampling`'s |Z| bound)."""

Drawn = Mapping[int, torch.Tensor]
"""One rank's completions: generation -> (N, T) ids, each completion once, in the order the rank drew them."""


def agreement(a: torch.Tensor, b: torch.Tensor, stop: int | None, pad: int) -> tuple[int, int]:
    """(positions whose tokens agree, positions compared): those drawn in both rows of each pair of `a` and `b`."""
    width = min(a.shape[1], b.shape[1])
    if width == 0:
        return 0, 0
    a, b = a[:, :width], b[:, :width]
    both = drawn_positions(a, stop, pad) & drawn_positions(b, stop, pad)
    return int(((a == b) & both).sum()), int(both.sum())


def pair_counts(mine: Drawn, theirs: Drawn, stop: int | None, pad: int) -> tuple[int, int, float, float]:
    """(aligned agreements, aligned positions compared, agreements expected, their variance) of two ranks, summed
    over the generations both drew (those with two completions or more on each)."""
    agreed = compared = 0
    expected = variance = 0.0
    for generation in sorted(set(mine) & set(theirs)):
        rows = min(len(mine[generation]), len(theirs[generation]))
        if rows < 2:
            continue
        a, b = mine[generation][:rows], theirs[generation][:rows]
        shifted = [agreement(a, b.roll(s, dims=0), stop, pad) for s in range(1, rows)]
        chance = (sum(x for x, _ in shifted) + 1) / (sum(n for _, n in shifted) + 2)
        x, n = agreement(a, b, stop, pad)
        agreed, compared = agreed + x, compared + n
        expected, variance = expected + n * chance, variance + n * chance * (1 - chance)
    return agreed, compared, expected, variance


def judge_across_ranks(drawn: Sequence[Drawn], stop: int | None, pad: int, check: Check, source: str) -> None:
    """Fail `check` when some pair of ranks drew its aligned completions with the same noise (module docstring), or
    when there is nothing to judge by; `source`: where the ranks record their completions, as a failure names it."""
    if not all(drawn):
        check.fail(f"a rank recorded no completion ids ({source})")
        return
    worst: tuple[float, str] | None = None
    for (i, mine), (j, theirs) in combinations(enumerate(drawn), 2):
        agreed, compared, expected, variance = pair_counts(mine, theirs, stop, pad)
        if compared == 0:
            continue
        z = (agreed - expected) / math.sqrt(variance)
        said = (f"ranks {i} and {j}: {agreed} of {compared} drawn positions of their aligned completions agree, "
                f"{expected:.1f} expected from their shifted pairings, Z {z:.1f}")  # fmt: skip
        if worst is None or z > worst[0]:
            worst = (z, said)
    if worst is None:
        check.fail("no two ranks drew completions of one generation with a drawn position to compare")
    elif worst[0] > BOUND:
        check.fail(f"the ranks drew their completions with the same random stream (every rank seeded alike?): "
                   f"{worst[1]} > {BOUND:g}")  # fmt: skip
    else:
        check.note(f"{worst[1]} <= {BOUND:g}")


def sampling_across_ranks(drawn: Sequence[Drawn], stop: int | None, pad: int, check_id: CheckId,
                          source: str) -> CheckResult:  # fmt: skip
    """The verdict of `judge_across_ranks` on every rank's `drawn` completions."""
    check = Check(check_id)
    judge_across_ranks(drawn, stop, pad, check, source)
    return check.finish()
