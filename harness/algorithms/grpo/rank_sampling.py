"""`sampling[ranks=N]` of verify-dist: the ranks' random streams are their own.

On one process `sampling` holds the drawn tokens to the policy network's distribution; it cannot see whether two
ranks drew with the same noise. A trainer that seeds every rank alike (the same seed, and nothing of the rank
added: TRL seeds each process with `set_seed(seed, device_specific=True)`) gives every rank the same random
stream. Where two ranks sample one prompt (TRL spreads a group over the ranks) their completions are copies of
each other, and the group's reward std collapses; where they sample different prompts, as the reference trainer
does, the k-th completion of each rank is drawn with the same noise at every position, and the toy policy's
distributions are close enough to uniform that the same noise mostly picks the same token.

What is compared, from each rank's loss records alone (the ids of each completion of a generation, each once):
for each pair of ranks and each generation, rank a's k-th completion (its rows in the order of their places) with
rank b's k-th ("aligned"), and with rank b's (k + s)-th for every other shift s ("shifted"), counting the
positions drawn in both (up to and including the first stop token or pad, harness/checks/sampling.py) and those
whose tokens agree. Drawn independently, every pairing agrees at a position with the same chance, sum_v p(v) q(v)
for the two positions' distributions p and q: the aligned pairing is one of the N shifts and no other's equal.
The shifted pairings give that chance r (with one agreement and one disagreement added, so that it is never 0
or 1); over the aligned pairs' n compared positions the agreements are then about binomial(n, r), and

    Z = (aligned agreements - n r) / sqrt(n r (1 - r))

over every generation of a pair of ranks (the sums of each generation's n, n r and n r (1 - r)) fails above
BOUND. On the toy world (a vocabulary of 32 tokens, completions of up to 12, the policy's logits small) r is 0.03
to 0.05 (1/32 = 0.031 for a uniform policy, more where the stop token and pad are likelier), and the uneven run's
two generations hold n of 124 to 274 aligned positions at seeds 0-4 (5 to 10 agreements expected): a Z of 5 is some
11 to 16 agreements above that. Seeded apart, the reference's Z is -1.4 to 0.8 at seeds 0-4; seeded alike, its
ranks agree at 26 to 47 % of those positions, Z 23 to 37. Only agreement above chance fails (fewer agreements
than chance is no shared stream).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

import torch

from harness.checks.sampling import drawn_positions
from harness.instrument.observe import Ran
from harness.verdict import Check, CheckId, CheckResult

from .instruments import recorded

BOUND = 5.0
"""The largest Z of aligned agreements a run of independent streams may show (as `sampling`'s |Z| bound)."""


def completions_of(ran: Ran) -> dict[int, torch.Tensor]:
    """Generation -> (N, T) this rank's completion ids of it, each completion once, in the order of their places."""
    seen: dict[int, dict[int, torch.Tensor]] = {}
    for record in recorded(ran).loss_inputs or ():
        ids = torch.as_tensor(record.completion_ids).long()
        places = (range(len(ids)) if record.completions is None
                  else torch.as_tensor(record.completions).reshape(-1).tolist())  # fmt: skip
        for j, place in enumerate(places):
            seen.setdefault(int(record.generation), {}).setdefault(int(place), ids[j])
    return {g: torch.stack([rows[p] for p in sorted(rows)]) for g, rows in seen.items()}


def agreement(a: torch.Tensor, b: torch.Tensor, stop: int | None, pad: int) -> tuple[int, int]:
    """(positions whose tokens agree, positions compared): those drawn in both rows of each pair of `a` and `b`."""
    width = min(a.shape[1], b.shape[1])
    a, b = a[:, :width], b[:, :width]
    both = drawn_positions(a, stop, pad) & drawn_positions(b, stop, pad)
    return int(((a == b) & both).sum()), int(both.sum())


def sampling_across_ranks(ranks: Sequence[Ran], check_id: CheckId) -> CheckResult:
    """Fail when some pair of ranks drew its aligned completions with the same noise (module docstring)."""
    check = Check(check_id)
    drawn = [completions_of(r) for r in ranks]
    if not all(drawn):
        check.fail("a rank recorded no completion ids (loss records with `completion_ids`)")
        return check.finish()
    stop, pad = ranks[0].stop_token_id, ranks[0].pad_token_id
    worst: tuple[float, str] | None = None
    for (i, mine), (j, theirs) in combinations(enumerate(drawn), 2):
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
    return check.finish()
