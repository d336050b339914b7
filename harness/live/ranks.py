"""The ranks of a live check: this process's rank, and every rank's records of a checked interval, gathered on
every rank (`gather_records`; without a process group, this process's own)."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from harness.instrument.loss import LossRecord


class GatherFailed(RuntimeError):
    """A rank's records of the interval could not be sent to the others (every rank raises it, at the same log)."""


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the process group, (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _Unsent:
    """What a rank sends in place of records it could not serialise: why."""

    def __init__(self, why: str) -> None:
        self.why = why


class Unsendable(list):
    """No records: this rank's recording of the interval failed (why)."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why


def _payload(records: Sequence[LossRecord]) -> bytes:
    """This rank's records, serialised (a failure here stays on this rank: it sends `_Unsent` instead)."""
    return pickle.dumps(list(records), protocol=pickle.HIGHEST_PROTOCOL)


def gather_records(records: Sequence[LossRecord]) -> list[list[LossRecord]]:
    """Every rank's records of the interval, in rank order (all ranks call this at the same log).

    A rank whose records cannot be serialised still takes part in the collective (it sends why), so no rank waits
    for it; then every rank raises `GatherFailed` naming it, and every rank skips the interval alike."""
    import torch.distributed as dist

    rank, world = rank_and_world()
    if world == 1:
        if isinstance(records, Unsendable):
            raise GatherFailed(f"its recording failed ({records.why})")
        return [list(records)]
    mine: Any
    if isinstance(records, Unsendable):
        mine = _Unsent(f"its recording failed ({records.why})")
    else:
        try:
            mine = _payload(records)
        except Exception as why:  # noqa: BLE001 - any failure of this rank's serialisation is sent, not raised
            mine = _Unsent(f"its records could not be sent ({type(why).__name__}: {why})")
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    unsent = [(r, p.why) for r, p in enumerate(everyone) if isinstance(p, _Unsent)]
    if unsent:
        raise GatherFailed("; ".join(f"rank {r}: {why}" for r, why in unsent))
    return [pickle.loads(p) for p in everyone]
