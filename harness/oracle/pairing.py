"""Which rollout row each training row is: micro-batch rows paired with rollout rows by what was recorded.

Rows are matched by their response token ids. Two prompts can give the same response
(e.g. just the stop token); within one epoch every rollout row runs exactly once, so the
identical rows of an epoch are paired with their rollout rows by the pairing whose
log-probs and entropies (over the response mask) are nearest, when it is clearly nearer
than the next best (half the total distance or less). Otherwise the pairing is not
recomputable, and neither is any metric that needs it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from harness.errors import NotRecomputable

MAX_IDENTICAL = 6
"""Identical rows paired by trying every permutation (6! = 720 at most)."""


@dataclass(frozen=True)
class Rows:
    """Recorded rows of one forward pass: response ids, log-probs and entropies, and the response mask."""

    responses: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    response_mask: torch.Tensor

    @property
    def count(self) -> int:
        """Number of rows."""
        return int(self.responses.shape[0])


def map_rows(rollout: Rows, micro_batches: list[Rows], where: str) -> list[torch.Tensor]:
    """For each micro-batch, the rollout row of each of its rows; NotRecomputable when that is not determined.

    `where` (e.g. "update 0") starts every message.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for number, response in enumerate(rollout.responses.tolist()):
        groups.setdefault(tuple(response), []).append(number)
    places = []  # (micro-batch, row, candidates) in the order the rows ran
    for m, batch in enumerate(micro_batches):
        for row, response in enumerate(batch.responses.tolist()):
            candidates = groups.get(tuple(response))
            if candidates is None:
                raise NotRecomputable(f"{where} micro-batch {m}: row {row} matches no rollout response")
            places.append((m, row, candidates))
    found: dict[tuple[int, int], int] = {(m, row): c[0] for m, row, c in places if len(c) == 1}
    ambiguous = [p for p in places if len(p[2]) > 1]
    if ambiguous:
        found.update(_pair_identical(rollout, micro_batches, places, ambiguous, where))
    return [
        torch.tensor([found[(m, row)] for row in range(batch.count)], dtype=torch.long)
        for m, batch in enumerate(micro_batches)
    ]


def _pair_identical(rollout: Rows, micro_batches: list[Rows], places, ambiguous, where) -> dict[tuple[int, int], int]:
    """Pair each run of identical-response rows with rollout rows, one epoch at a time."""
    position = {(m, row): i for i, (m, row, _) in enumerate(places)}
    chosen: dict[tuple[int, int], int] = {}
    by_epoch_group: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = {}
    for m, row, candidates in ambiguous:
        by_epoch_group.setdefault((position[(m, row)] // rollout.count, tuple(candidates)), []).append((m, row))
    for (epoch, candidates), spots in by_epoch_group.items():
        chosen.update(_pair_group(rollout, micro_batches, list(candidates), spots, f"{where} epoch {epoch}"))
    return chosen


def _pair_group(rollout: Rows, micro_batches: list[Rows], candidates: list[int], spots, where) -> dict:
    """One epoch's rows with identical responses, paired with their rollout rows, or NotRecomputable.

    The pairing does not matter when the candidates' rollout log-probs are equal over the
    response mask (any pairing gives the same numbers). Otherwise a pairing is taken only
    when it is clearly better (half the cost of the next best or less) under a cost that
    allows for the policy having moved: the spread, across the paired rows, of the per-token
    differences between training and rollout log-probs and entropies. A move of the policy
    shifts all of them alike; a wrong pairing adds the difference between two prompts. The
    cost is taken over the response mask first, then over every position (past the response
    the tokens are identical too, and the log-probs there still depend on the prompt).
    """
    mask = rollout.response_mask[candidates[0]]
    first = rollout.logprobs[candidates[0]][mask]
    if all(torch.equal(rollout.logprobs[c][mask], first) for c in candidates[1:]):
        return {spot: candidates[i % len(candidates)] for i, spot in enumerate(spots)}  # nothing depends on it
    if len(spots) != len(candidates):
        raise NotRecomputable(
            f"{where}: {len(spots)} training rows share one response with {len(candidates)} rollout rows "
            f"{candidates}: not one run per rollout row, so they cannot be paired"
        )
    if len(candidates) > MAX_IDENTICAL:
        raise NotRecomputable(f"{where}: {len(candidates)} rollout rows {candidates} share one response")
    totals: list[tuple[float, tuple[int, ...]]] = []
    for positions in (mask, torch.ones_like(mask)):  # the response; then every position, where the prompt still shows
        totals = sorted(
            (_spread(rollout, micro_batches, spots, perm, positions), perm)
            for perm in itertools.permutations(candidates)
        )
        if totals[0][0] <= 0.5 * totals[1][0]:
            return dict(zip(spots, totals[0][1]))
    raise NotRecomputable(
        f"{where}: rollout rows {candidates} have identical responses, and "
        f"log-probs and entropies too close to tell apart ({totals[0][0]:.3g} vs {totals[1][0]:.3g})"
    )


def _spread(rollout: Rows, micro_batches: list[Rows], spots, perm, mask: torch.Tensor) -> float:
    """Sum over response tokens of how far each paired row's (training - rollout) differences sit from their mean."""
    cost = 0.0
    for field in ("logprobs", "entropy"):
        diffs = torch.stack(
            [
                getattr(micro_batches[m], field)[row][mask] - getattr(rollout, field)[c][mask]
                for (m, row), c in zip(spots, perm)
            ]
        )
        cost += float((diffs - diffs.mean(dim=0)).abs().sum())
    return cost
