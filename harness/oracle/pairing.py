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
        costs = {
            (spot, c): _distance(micro_batches[spot[0]], spot[1], rollout, c) for spot in spots for c in candidates
        }
        if (
            all(cost == 0.0 for cost in costs.values())
            or len(candidates) > MAX_IDENTICAL
            or len(spots) != len(candidates)
        ):
            totals = []  # nothing to choose between (or not a permutation): take them in order
            pairing = dict(zip(spots, candidates))
        else:
            totals = sorted(
                (sum(costs[(spot, c)] for spot, c in zip(spots, perm)), perm)
                for perm in itertools.permutations(candidates)
            )
            pairing = dict(zip(spots, totals[0][1]))
        if len(totals) > 1 and totals[0][0] > 0.5 * totals[1][0]:
            raise NotRecomputable(
                f"{where} epoch {epoch}: rollout rows {list(candidates)} have identical responses, and "
                f"log-probs and entropies too close to tell apart ({totals[0][0]:.3g} vs {totals[1][0]:.3g})"
            )
        chosen.update(pairing)
    return chosen


def _distance(batch: Rows, row: int, rollout: Rows, candidate: int) -> float:
    """How far a micro-batch row's log-probs and entropies (over its response mask) are from a rollout row's."""
    active = batch.response_mask[row]
    if not active.any():
        return 0.0  # no response token: nothing the oracle computes depends on the pairing
    gap = (rollout.entropy[candidate][active] - batch.entropy[row][active]).abs()
    gap = gap + (rollout.logprobs[candidate][active] - batch.logprobs[row][active]).abs()
    return gap.sum().item()
