"""The value model's outputs of one update, at the response positions, paired with rows.

The value-head records (`ValueHeadCall`, made by the hook on the run's `value_head`) of an
update are told apart by autograd: the rollout's (off) are its old values, one record per
rollout chunk, in the order of the rollout rows; the training ones (on) are the new values,
one per micro-batch, in the order the micro-batches ran. Each record holds the head's output
at every position of its rows, prompt included; the value of response position t is read
from the position before it, as the logits are (docs/metrics.md, "The update"): of an output
L wide for responses T wide, positions L - T - 1 ... L - 2.
"""

from __future__ import annotations

import torch

from harness.errors import NotRecomputable
from harness.instrument.records import ValueHeadCall

from ..view import UpdateView

NO_HEAD = (
    "no value-head output was recorded: the target exposes no `value_head` module (docs/architecture.md), "
    "so the values the trainer used are unknown"
)


def response_values(record: ValueHeadCall, width: int, where: str) -> torch.Tensor:
    """(rows, width) values of the response positions of one record."""
    values = record.values
    if values.dim() != 2 or values.shape[1] < width + 1:
        raise NotRecomputable(
            f"{where}: value-head output of shape {tuple(values.shape)} has no {width} response positions "
            "after a prompt (expected (rows, prompt + response) or (rows, prompt + response, 1))"
        )
    length = values.shape[1]
    return values[:, length - width - 1 : length - 1]


def _records(update: UpdateView, grad: bool) -> list[ValueHeadCall]:
    return [r for r in update.ignored if isinstance(r, ValueHeadCall) and r.grad == grad]


def rollout_values(update: UpdateView) -> torch.Tensor:
    """(N, T) old values of the rollout rows, 0 outside V (the trainer masks them so); NotRecomputable otherwise."""
    if update.rollout is None:
        raise NotRecomputable(update.rollout_problem or "no rollout records")
    where, rollout = f"update {update.index}", update.rollout
    records = _records(update, grad=False)
    if not records:
        raise NotRecomputable(f"{where}: {NO_HEAD}")
    width = rollout.responses.shape[1]
    values = torch.cat([response_values(r, width, where) for r in records])
    if values.shape[0] != rollout.samples:
        raise NotRecomputable(
            f"{where}: {values.shape[0]} rows of rollout values (autograd off) for {rollout.samples} rollout rows"
        )
    return torch.where(rollout.value_mask, values, torch.zeros_like(values))


def micro_batch_values(update: UpdateView) -> list[torch.Tensor]:
    """(rows, T) new values of each micro-batch, in order; NotRecomputable unless one record each, rows alike."""
    where = f"update {update.index}"
    records = _records(update, grad=True)
    if not records:
        raise NotRecomputable(f"{where}: {NO_HEAD} (no training forward, autograd on, was seen)")
    if len(records) != len(update.micro_batches):
        raise NotRecomputable(
            f"{where}: {len(records)} value-head forwards with autograd on for {len(update.micro_batches)} "
            "micro-batches (expected one each)"
        )
    out = []
    for micro, record in zip(update.micro_batches, records):
        values = response_values(record, micro.responses.shape[1], micro.where)
        if values.shape[0] != micro.rows:
            raise NotRecomputable(f"{micro.where}: {values.shape[0]} rows of values for {micro.rows} rows")
        out.append(values)
    return out
