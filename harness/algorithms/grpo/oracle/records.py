"""Whether GRPO loss records can be recomputed at all: one record's problems (shapes that disagree, no log-probs)
and why an interval's records determine none of its metrics. The view, the gradient oracle and live mode ask this
before anything is recomputed."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.instrument.loss import LossRecord


def record_problems(record: LossRecord) -> list[str]:
    """What is wrong with one loss record (shapes that disagree, no log-probs); empty when it is usable."""
    mask = record.completion_mask
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return ["completion_mask is not a (B, T) tensor"]
    problems = []
    for key in ("logps", "old_logps", "ref_logps", "entropies"):
        value = getattr(record, key)
        if value is not None and tuple(value.shape) != tuple(mask.shape):
            problems.append(f"{key} has shape {tuple(value.shape)}, the mask {tuple(mask.shape)}")
    if record.logps is None:
        problems.append("logps is None")
    adv = record.advantages
    if adv is None or tuple(adv.shape) != (mask.shape[0],):
        problems.append(f"advantages has shape {None if adv is None else tuple(adv.shape)}, want ({mask.shape[0]},)")
    return problems


def unusable(records: Sequence[LossRecord], problems: Sequence[str] | None = None) -> str:
    """Why the records of an interval determine none of its metrics ('' when they are usable); `problems`: the
    records' problems when already known."""
    if not records:
        return "no loss record in this interval"
    problems = [p for r in records for p in record_problems(r)] if problems is None else problems
    return f"unusable loss records: {problems[0]}" if problems else ""
