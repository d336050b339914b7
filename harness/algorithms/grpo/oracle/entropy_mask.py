"""TRL's entropy mask of the policy loss (`top_entropy_quantile`, docs/grpo-metrics.md section 4), recomputed in
float64 from the recorded entropies and masks.

With `top_entropy_quantile` q < 1, the policy term of token t stays in the loss only where its entropy is at or above
the (1 - q) quantile (linear interpolation, torch.quantile's) of the masked entropies of its micro-batch on every
rank (TRL's `get_high_entropy_mask`, called from `_compute_loss` once per micro-batch, gathers them across
processes); a micro-batch with no token on any rank keeps none. The KL term is added after the mask, on every token.
A rank's k-th micro-batch of an optimizer step runs beside every other rank's k-th, so those records are one
micro-batch here.

A token whose entropy lies within the rounding margin of the threshold may fall on either side in the trainer: the
margin of the coarser of the dtype the trainer held the entropies in and float32 (TRL takes the quantile of
`entropies.float()`), relative to the threshold. Such a token is uncertain: its gradient is not compared, and its
policy term may or may not be in the pooled `policy_loss`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.errors import NotRecomputable
from harness.instrument.loss import LossRecord
from harness.oracle.precision import coarsest
from harness.tolerances import margin_of

QUANTILE_DTYPE = "float32"
"""The finest dtype the threshold is taken in (TRL: `entropies[mask].float()`)."""


@dataclass(frozen=True)
class EntropyMask:
    """Which tokens of one micro-batch keep their policy term, and which may fall on either side of the threshold."""

    kept: torch.Tensor
    """(B, T) bool: masked tokens whose entropy is at or above the threshold."""
    uncertain: torch.Tensor
    """(B, T) bool: masked tokens whose entropy is within the rounding margin of the threshold."""
    threshold: float | None
    """The (1 - q) quantile of the micro-batch's masked entropies on every rank (None: no token to take it of)."""


def steps(records: Sequence[LossRecord]) -> list[tuple[int, int]]:
    """(window, k) of each record: its rank's k-th micro-batch of optimizer step `window`."""
    seen: dict[tuple[int, int], int] = {}
    out = []
    for record in records:
        key = (int(record.window), int(record.rank))
        out.append((key[0], seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    return out


def entropies_of(record: LossRecord) -> torch.Tensor:
    """The record's entropies in float64; NotRecomputable without them (the mask is of them)."""
    if record.entropies is None:
        raise NotRecomputable("top_entropy_quantile < 1 but the loss records hold no per-token entropies")
    return record.entropies.double()


def threshold(records: Sequence[LossRecord], quantile: float) -> float | None:
    """The (1 - quantile) quantile of the records' masked entropies together (None when they have no token)."""
    values = torch.cat([entropies_of(r)[r.completion_mask.bool()] for r in records])
    return float(torch.quantile(values, 1 - quantile)) if values.numel() else None


def entropy_mask(record: LossRecord, cut: float | None) -> EntropyMask:
    """The mask of one record at threshold `cut` (none kept where it is None)."""
    mask = record.completion_mask.bool()
    if cut is None:
        return EntropyMask(torch.zeros_like(mask), torch.zeros_like(mask), None)
    entropies = entropies_of(record)
    margin = margin_of(coarsest(record.held_dtype("entropies"), QUANTILE_DTYPE))
    return EntropyMask((entropies >= cut) & mask, mask & ((entropies - cut).abs() <= margin * abs(cut)), cut)


def entropy_masks(records: Sequence[LossRecord], quantile: float) -> list[EntropyMask | None]:
    """Each record's mask, its threshold taken over the records of its micro-batch on every rank (module docstring);
    None for each when `quantile` is 1 or more (no mask)."""
    if quantile >= 1:
        return [None] * len(records)
    keys = steps(records)
    groups: dict[tuple[int, int], list[LossRecord]] = {}
    for key, record in zip(keys, records):
        groups.setdefault(key, []).append(record)
    cuts = {key: threshold(group, quantile) for key, group in groups.items()}
    return [entropy_mask(record, cuts[key]) for key, record in zip(keys, records)]


def of_record(record: LossRecord, quantile: float, given: EntropyMask | None = None) -> EntropyMask | None:
    """The mask of `record`: `given` (its micro-batch's, every rank's records together) when there is one, else that
    of the record alone (one rank); None when `quantile` is 1 or more."""
    if quantile >= 1:
        return None
    return given if given is not None else entropy_masks([record], quantile)[0]


def policy_kept(mask: EntropyMask | None, *terms: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-token policy terms with the entropy mask applied (as they are without one)."""
    if mask is None:
        return terms
    return tuple(term * mask.kept for term in terms)
