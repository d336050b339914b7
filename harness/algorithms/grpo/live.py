"""One checked logging interval: its loss records (every rank's, merged as the trainer gathers them) against what
the trainer logged for it, in float64, with the diagnosis of a wrong pooling.

The oracle is the gate's (harness/algorithms/grpo/view.py, expect.py): the interval's records are one
`IntervalView`, its `expected` the pooled metrics, and a failing metric is diagnosed by
`poolings.diagnose_interval` (classes 16 to 18, the wrong KL terms). Nothing here touches the trainer; what is
reported of an interval is live mode's own (harness/live/interval.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.algorithms.grpo.contract import pooled_names
from harness.algorithms.grpo.oracle.expect import Settings
from harness.algorithms.grpo.oracle.records import record_problems
from harness.algorithms.grpo.spec import LOSS_TYPES
from harness.algorithms.grpo.tolerances import TOLERANCES
from harness.algorithms.grpo.view import IntervalView
from harness.algorithms.grpo.wrong.poolings import diagnose_interval
from harness.compare import compare
from harness.instrument.loss import LossRecord
from harness.live.interval import IntervalResult
from harness.oracle.numbers import as_float
from harness.verdict import MetricVerdict

GAP_NAMES = ("logit_gap/logps", "logit_gap/entropies")
"""The largest gap over the interval between the trainer's log-probs (entropies) and their float64 recompute from
what its functions were given, where the records carry them (the gate's `logit_recompute`, against 0)."""
CONTRACT = frozenset(n for beta in (0.0, 1.0) for t in LOSS_TYPES for n in pooled_names(beta, t))
"""The contract's pooled metrics, of every loss type."""


def _padded(tensor: torch.Tensor | None, width: int, fill: float | bool) -> torch.Tensor | None:
    if tensor is None or tensor.shape[1] == width:
        return tensor
    pad = torch.full((tensor.shape[0], width - tensor.shape[1]), fill, dtype=tensor.dtype)
    return torch.cat([tensor, pad], dim=1)


def merge_rows(records: Sequence[LossRecord]) -> LossRecord:
    """The micro-batches of one position on every rank as one record: the rows of each, padded (masked off) to the
    longest completion. TRL reduces each micro-batch's sums over the ranks before it logs a micro-batch's value,
    so the merged record is the unit its micro-batch statistics are made of."""
    if len(records) == 1:
        return records[0]
    width = max(int(r.completion_mask.shape[1]) for r in records)
    joined: dict[str, Any] = {}
    for name, fill in (("completion_mask", False), ("logps", 0.0), ("old_logps", 0.0), ("ref_logps", 0.0),
                       ("entropies", 0.0), ("logp_grad", 0.0), ("completion_ids", 0)):  # fmt: skip
        parts = [getattr(r, name) for r in records]
        joined[name] = None if any(p is None for p in parts) else torch.cat([_padded(p, width, fill) for p in parts])
    joined["advantages"] = torch.cat([r.advantages for r in records])
    completions = [r.completions for r in records]
    joined["completions"] = None if any(c is None for c in completions) else torch.cat(completions)
    return dataclasses.replace(records[0], rank=0, logit_gaps=None, **joined)


def merge_ranks(per_rank: Sequence[Sequence[LossRecord]]) -> list[LossRecord]:
    """Every rank's records of one interval, the i-th micro-batch of each rank merged (`merge_rows`); ranks that
    ran different numbers of micro-batches keep the extra ones unmerged."""
    if len(per_rank) == 1:
        return list(per_rank[0])
    longest = max(len(records) for records in per_rank)
    merged = []
    for i in range(longest):
        merged.append(merge_rows([records[i] for records in per_rank if i < len(records)]))
    return merged


def gap_verdicts(records: Sequence[LossRecord], dtype: str, where: str) -> list[MetricVerdict]:
    """The interval's largest logit gaps against 0 (a NaN gap stays NaN and fails), for each quantity every record
    has a gap of; none when the recorder did not recompute them."""
    worst: dict[str, float] = {}
    for name in GAP_NAMES:
        key = name.removeprefix("logit_gap/")
        gaps = [getattr(r.logit_gaps, key) if r.logit_gaps is not None else None for r in records]
        if gaps and all(g is not None for g in gaps):
            values = [float(g) for g in gaps]
            worst[name] = next((g for g in values if math.isnan(g)), max(values))
    return compare(worst, {name: 0.0 for name in worst}, dtype, TOLERANCES, kind="recompute", where=where)


@dataclass(frozen=True)
class GenerationCut:
    """What the gradient check needs beyond the records and the settings: the trainer's cut of a generation."""

    steps_per_generation: int
    num_iterations: int


def gradient_verdicts(
    records: Sequence[LossRecord], settings: Settings, geometry: GenerationCut, world: int, where: str
) -> tuple[list[MetricVerdict], str]:
    """The gate's `logp_gradient` on the interval: each recorded gradient at the log-probs against the loss type's
    formula over every rank's tokens (harness/algorithms/grpo/oracle/gradients.py). ([], why) when the interval's
    records do not determine it (e.g. a generation batch that began before the interval, whose token count
    dapo's weights need), or no token has a gradient."""
    from harness.algorithms.grpo.oracle import gradients
    from harness.errors import NotRecomputable

    shape = gradients.WindowWeights(settings, geometry.steps_per_generation, geometry.num_iterations, world)
    try:
        gap = gradients.gaps(records, shape)
    except NotRecomputable as why:
        return [], f"logp_gradient ({why})"
    if gap.compared == 0 or not gap.scale > 0:
        return [], "logp_gradient (no token with a non-zero gradient)"
    logged, expected, _ = gradients.expectation(gap)
    where = f"{where} {gap.where}".strip()
    return compare(logged, expected, settings.dtype, TOLERANCES, kind="formula", where=where), ""


def check_interval(
    per_rank: Sequence[Sequence[LossRecord]],
    logged: Mapping[str, Any],
    settings: Settings,
    interval: int,
    step: int,
    geometry: GenerationCut | None = None,
) -> IntervalResult:
    """The interval's logged contract metrics against the oracle over every rank's records, each failing one
    diagnosed. Metrics the trainer does not log (e.g. TRL's `policy_loss` without an entropy bonus) are not
    checked and are named in `not_checked`. With `geometry`, the recorded gradients at the log-probs are held to
    the formula too (`logp_gradient`), where the interval's records determine it."""
    wall, cpu = time.perf_counter(), time.process_time()
    records = merge_ranks(per_rank)
    problems = tuple(p for r in records for p in record_problems(r))
    view = IntervalView(interval, tuple(records), settings, problems)
    names = pooled_names(settings.beta, settings.loss_type)
    present = {n: logged[n] for n in names if n in logged and as_float(logged[n]) is not None}
    not_checked = tuple(f"{n} (not logged)" for n in names if n not in present)
    tokens = sum(int(r.completion_mask.sum()) for r in records)
    ranks = len(per_rank)
    base = dict(interval=interval, step=step, micro_batches=len(records), ranks=ranks, tokens=tokens,
                not_checked=not_checked, logged_names=CONTRACT)  # fmt: skip
    if view.unusable:
        return IntervalResult(verdicts=(), problem=view.unusable, seconds=time.perf_counter() - wall,
                              cpu_seconds=time.process_time() - cpu, **base)  # fmt: skip
    expected = view.expected
    where = f"log {interval + 1} (step {step})"
    verdicts = compare(present, {n: expected[n] for n in present}, settings.dtype, TOLERANCES, where=where)
    verdicts = diagnose_interval(verdicts, view, settings.dtype)
    every = [r for rs in per_rank for r in rs]
    verdicts += gap_verdicts(every, settings.dtype, where)
    if geometry is not None:
        more, why = gradient_verdicts(every, settings, geometry, ranks, where)
        verdicts += more
        if why:
            base["not_checked"] = (*not_checked, why)
    return IntervalResult(verdicts=tuple(verdicts), seconds=time.perf_counter() - wall,
                          cpu_seconds=time.process_time() - cpu, **base)  # fmt: skip
