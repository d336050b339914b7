"""The GRPO oracle's completion lengths: the length statistics of section 3 from the loss records alone.

Each loss record names which completion of its generation each row is (`completions`) and keeps
the rows' token ids (`completion_ids`). A completion's length is the number of tokens in its mask;
it terminated when the run's stop token lies within its mask (so a stop token sampled after the
mask ended, or a truncated completion, does not count). Over the completions an interval trained,
each once (a completion trained in two passes, or by two micro-batches, counts once), every rank
(docs/grpo-metrics.md, section 3):

    completions/mean_length, /min_length, /max_length     over every completion
    completions/clipped_ratio                              the share that did not terminate
    completions/mean_terminated_length, /min_, /max_       over those that did; 0 when none did

The trainer's own functions are never called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from harness.instrument.loss import LossRecord
from harness.oracle.pooling import Expectation

from ..definitions import AT_LIMIT, NO_STOP

LENGTH_NAMES = (
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
)
"""Every length statistic the contract logs, in the order of docs/grpo-metrics.md."""


@dataclass(frozen=True)
class Completion:
    """One trained completion as the records show it."""

    generation: int
    rank: int
    index: int
    """Its place in its rank's generation batch (`completions`)."""
    length: int
    terminated: bool
    ends_in_pad: bool = False
    """Its last token in the mask is the pad token (a diagnosis only: such a completion did not terminate)."""


def trained_completions(records: Iterable[LossRecord], stop_token_id: int | None,
                        pad_token_id: int | None = None) -> list[Completion] | str:  # fmt: skip
    """Every completion the records trained, each once, in the order first seen; or why they do not say."""
    if stop_token_id is None:
        return "the target does not say which token stops a completion (`stop_token_id`)"
    seen: dict[tuple[int, int, int], Completion] = {}
    for k, record in enumerate(records):
        mask, ids, places = record.completion_mask, record.completion_ids, record.completions
        if places is None:
            return f"loss record {k + 1} does not say which completions its rows are (`completions`)"
        if ids is None:
            return f"loss record {k + 1} does not keep its rows' token ids (`completion_ids`)"
        ids = torch.as_tensor(ids)
        if tuple(ids.shape) != tuple(mask.shape):
            return f"loss record {k + 1}: completion_ids has shape {tuple(ids.shape)}, the mask {tuple(mask.shape)}"
        places = torch.as_tensor(places).reshape(-1).tolist()
        if len(places) != mask.shape[0]:
            return f"loss record {k + 1}: {len(places)} completions for {mask.shape[0]} rows"
        mask = mask.bool()
        lengths = mask.sum(dim=1).tolist()
        stopped = ((ids == int(stop_token_id)) & mask).any(dim=1).tolist()
        last = ids.gather(1, (mask.sum(dim=1, keepdim=True) - 1).clamp(min=0)).reshape(-1)
        padded = ((last == (-1 if pad_token_id is None else int(pad_token_id))) & mask.any(dim=1)).tolist()
        generation, rank = int(record.generation), int(record.rank)
        for j, index in enumerate(places):
            row = Completion(generation, rank, int(index), int(lengths[j]), bool(stopped[j]), bool(padded[j]))
            key = (generation, rank, int(index))
            if key in seen and (seen[key].length, seen[key].terminated) != (row.length, row.terminated):
                return (f"loss record {k + 1}, row {j + 1}: completion {index} of generation {generation} is trained "
                        f"again with another mask or ids")  # fmt: skip
            seen.setdefault(key, row)
    return list(seen.values())


def length_stats(completions: Iterable[Completion], cap: int | None = None,
                 truncation: str = NO_STOP) -> dict[str, Expectation]:  # fmt: skip
    """The length statistics over `completions` (each once); {} when there is none. The terminated ones over no
    terminated completion are 0 (`count` 0), as the contract and TRL log them. The clipped ratio counts the
    completions without the stop token, or, under the declared `truncation` 'at_limit', those of `cap` tokens
    (definitions.py)."""
    rows = list(completions)
    if not rows:
        return {}
    lengths = torch.tensor([c.length for c in rows], dtype=torch.float64)
    ended = torch.tensor([c.length for c in rows if c.terminated], dtype=torch.float64)
    if truncation == AT_LIMIT:
        clipped = sum(c.length == cap for c in rows) / len(rows)
    else:
        clipped = sum(not c.terminated for c in rows) / len(rows)
    out = {
        "completions/mean_length": _exp("completions/mean_length", float(lengths.mean()), lengths),
        "completions/min_length": _exp("completions/min_length", float(lengths.min()), lengths),
        "completions/max_length": _exp("completions/max_length", float(lengths.max()), lengths),
        "completions/clipped_ratio": Expectation("completions/clipped_ratio", clipped, count=len(rows)),
    }
    for name, value in (("mean", ended.mean), ("min", ended.min), ("max", ended.max)):
        metric = f"completions/{name}_terminated_length"
        out[metric] = _exp(metric, float(value()) if ended.numel() else 0.0, ended)
    return out


def pad_as_stop(completions: Iterable[Completion]) -> list[Completion]:
    """The completions as a trainer would count them that takes a last token that is the pad for the stop token
    (TRL 1.12.0: truncated when the last id is neither EOS nor pad), to name that rule when it explains a gap."""
    return [dataclasses.replace(c, terminated=c.terminated or c.ends_in_pad) for c in completions]


def _exp(metric: str, value: float, values: torch.Tensor) -> Expectation:
    scale = float(values.abs().mean()) if values.numel() else 0.0
    return Expectation(metric, value, count=values.numel(), scale=scale)
