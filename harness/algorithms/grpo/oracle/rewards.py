"""The GRPO oracle's rewards: each completion's reward and advantage, and the reward statistics, in float64.

Read from the reward-call records alone (`RewardCall`s): the scores each reward function gave
each completion of a generation, on every rank. Which score is which function's is the records':
a call's `index` is its function's place in the list the trainer was handed, and its weight is the
one at that place of the run's `reward_weights` in the order the target handed them over
(`handed_weights`: reversed under `reward_order` 'reversed'), never a fixed order of the functions.
With those weights, `num_generations` and `scale_rewards` (docs/grpo-metrics.md, "Advantages" and
section 3):

    reward   r_i = sum over the functions that scored i of weight * score  (NaN when none did)
    A_i          = r_i - mean of i's group, divided by (std + 1e-4) of the group ('group'), of the
                   whole generation batch on every rank ('batch'), or by nothing ('none')

means and Bessel-corrected stds leave NaN rewards out, and an advantage that comes out NaN (an
unscorable completion, a group with no two scored rewards) is 0. With `multi_objective_aggregation`
'normalize_then_sum' (GDPO; TRL's `_generate_and_score_completions`) `scale_rewards` is not read:

    z_fi     = (score_fi - mean of f's scores in i's group) / (their std + 1e-4)   (NaN: fewer than two)
    R_i      = sum over the f whose z_fi is a number of weight_f * z_fi  (0 when none is; NaN, unscorable)
    A_i      = (R_i - mean of R over the generation batch) / (its std + 1e-4), and zero_std is that std's

The logged `reward` stays the weighted sum of the scores. Groups are `num_generations`
consecutive rows of the generation batch, ranks concatenated in rank order (as the trainers
gather them). The trainer's own functions are never called.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.instrument.loss import LossRecord, RewardCall
from harness.oracle.pooling import Expectation

STD_EPS = 1e-4
"""Added to the std an advantage is divided by (docs/grpo-metrics.md; TRL's constant)."""
ZERO_STD = 1e-8
"""A group's reward std counts as 0 at or below this (docs/grpo-metrics.md, section 8)."""


@dataclass(frozen=True)
class Generation:
    """One generation batch, every rank, as the oracle recomputes it: one row per completion."""

    names: tuple[str, ...]
    """The reward functions, in the order of their weights."""
    scores: torch.Tensor
    """(N, F) float64: each function's score of each completion; NaN where it could not score."""
    offsets: Mapping[int, tuple[int, int]]
    """rank -> (first row, rows) of that rank's completions in the batch."""
    rewards: torch.Tensor
    advantages: torch.Tensor
    zero_std: torch.Tensor
    """Whether the completion's group has reward std 0 (a group with fewer than two scored rewards has none)."""

    def row(self, rank: int, index: int) -> int | None:
        """The batch row of completion `index` of `rank`'s generation batch, or None when there is none."""
        first, count = self.offsets.get(rank, (0, 0))
        return first + index if 0 <= index < count else None


def nan_mean(values: torch.Tensor) -> float:
    """Mean of the non-NaN values; NaN when there is none."""
    kept = values[~values.isnan()]
    return float(kept.mean()) if kept.numel() else math.nan


def nan_std(values: torch.Tensor) -> float:
    """Bessel-corrected std of the non-NaN values; NaN when fewer than two are left."""
    kept = values[~values.isnan()]
    if kept.numel() < 2:
        return math.nan
    return math.sqrt(float(((kept - kept.mean()) ** 2).sum()) / (kept.numel() - 1))


def weighted_rewards(scores: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """(N,) sum of weight * score over the functions that scored; NaN where none did."""
    w = torch.tensor(list(weights), dtype=torch.float64)
    unscored = scores.isnan()
    total = torch.where(unscored, torch.zeros_like(scores), scores * w).sum(dim=1)
    return total.masked_fill(unscored.all(dim=1), math.nan)


def group_advantages(
    rewards: torch.Tensor, size: int, scale_rewards: str, epsilon: float = STD_EPS
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, zero_std) of a generation batch whose groups are `size` consecutive rows; `epsilon` is added to
    the std (the target's declared `advantage_epsilon`, definitions.py)."""
    groups = rewards.view(-1, size)
    means = torch.tensor([nan_mean(g) for g in groups], dtype=torch.float64).repeat_interleave(size)
    stds = torch.tensor([nan_std(g) for g in groups], dtype=torch.float64).repeat_interleave(size)
    advantages = rewards - means
    if scale_rewards == "group":
        advantages = advantages / (stds + epsilon)
    elif scale_rewards == "batch":
        advantages = advantages / (nan_std(rewards) + epsilon)
    return torch.nan_to_num(advantages, nan=0.0), stds.abs() <= ZERO_STD


def decoupled_advantages(scores: torch.Tensor, weights: Sequence[float], size: int,
                         epsilon: float = STD_EPS) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(advantages, zero_std) under 'normalize_then_sum' (the module docstring), one function and one group at a
    time."""
    rows, functions = scores.shape
    normalised = torch.full_like(scores, math.nan)
    for first in range(0, rows, size):
        for f in range(functions):
            column = scores[first:first + size, f]
            normalised[first:first + size, f] = (column - nan_mean(column)) / (nan_std(column) + epsilon)
    summed = torch.tensor([sum(w * float(z) for w, z in zip(weights, row) if not math.isnan(z))
                           for row in normalised], dtype=torch.float64)  # fmt: skip
    summed = summed.masked_fill(scores.isnan().all(dim=1), math.nan)
    spread = nan_std(summed)
    advantages = torch.nan_to_num((summed - nan_mean(summed)) / (spread + epsilon), nan=0.0)
    return advantages, torch.full((rows,), abs(spread) <= ZERO_STD)


def handed_weights(spec: Any) -> tuple[float, ...]:
    """The run's reward weights in the order its target handed the functions to the trainer, that of the reward
    calls' `index` (GRPOSpec.handed_weights; a spec without it: its `reward_weights`); one weight 1 when none are
    given."""
    return tuple(getattr(spec, "handed_weights", None) or spec.reward_weights or (1.0,))


def generations(
    calls: Sequence[RewardCall] | None, spec: Any, epsilon: float = STD_EPS
) -> dict[int, Generation] | str:
    """Every generation the reward calls scored, recomputed (`epsilon`: the advantage's, as the target declares it);
    or why they cannot be (the reason, a string)."""
    if not calls:
        return "the target recorded no reward calls (`reward_calls` is empty or absent)"
    weights = handed_weights(spec)
    seen: dict[int, dict[int, dict[int, tuple[str, torch.Tensor]]]] = {}
    for call in calls:
        by_index = seen.setdefault(int(call.generation), {}).setdefault(int(call.rank), {})
        if int(call.index) in by_index:
            return f"reward function {call.function!r} was called twice for generation {call.generation}"
        by_index[int(call.index)] = (str(call.function), torch.as_tensor(call.scores).double().reshape(-1))
    out: dict[int, Generation] = {}
    for generation, ranks in sorted(seen.items()):
        made = _generation(generation, ranks, weights, spec, epsilon)
        if isinstance(made, str):
            return made
        out[generation] = made
    return out


def _generation(generation: int, ranks, weights: tuple[float, ...], spec: Any, epsilon: float) -> Generation | str:
    blocks, offsets, names, first = [], {}, None, 0
    for rank, by_index in sorted(ranks.items()):
        if sorted(by_index) != list(range(len(weights))):
            return (f"generation {generation}, rank {rank}: reward functions {sorted(by_index)} were called, "
                    f"expected one call of each of the {len(weights)} the reward_weights weigh")  # fmt: skip
        columns = [by_index[i][1] for i in range(len(weights))]
        if len({c.numel() for c in columns}) != 1:
            return f"generation {generation}, rank {rank}: the reward functions scored different numbers of rows"
        rank_names = tuple(by_index[i][0] for i in range(len(weights)))
        if names is not None and rank_names != names:
            return f"generation {generation}: the ranks' reward functions differ ({names} and {rank_names})"
        names = rank_names
        blocks.append(torch.stack(columns, dim=1))
        offsets[rank] = (first, columns[0].numel())
        first += columns[0].numel()
    scores = torch.cat(blocks)
    if len(scores) % spec.num_generations:
        return (f"generation {generation}: {len(scores)} completions scored, not a whole number of groups of "
                f"num_generations={spec.num_generations}")  # fmt: skip
    advantages, zero_std = scored_advantages(scores, weights, spec, epsilon)
    return Generation(names, scores, offsets, weighted_rewards(scores, weights), advantages, zero_std)


def scored_advantages(scores: torch.Tensor, weights: Sequence[float], spec: Any,
                      epsilon: float = STD_EPS) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(advantages, zero_std) of one generation batch's (N, F) scores, each column weighed by the weight at its
    place, under the spec's `multi_objective_aggregation`, `num_generations` and `scale_rewards`."""
    if getattr(spec, "multi_objective_aggregation", "sum_then_normalize") == "normalize_then_sum":
        return decoupled_advantages(scores, weights, spec.num_generations, epsilon)
    return group_advantages(weighted_rewards(scores, weights), spec.num_generations, spec.scale_rewards, epsilon)


def trained_rows(records: Iterable[LossRecord], made: Mapping[int, Generation]) -> list[tuple] | str:
    """(generation, batch row, record number, row in record) of every row of `records`; or why one has none."""
    out = []
    for k, record in enumerate(records):
        completions = record.completions
        if completions is None:
            return f"loss record {k + 1} does not say which completions its rows are (`completions`)"
        generation, rank = int(record.generation), int(record.rank)
        if generation not in made:
            return f"loss record {k + 1} trains generation {generation}, which no reward call scored"
        completions = torch.as_tensor(completions).reshape(-1).tolist()
        if len(completions) != int(record.completion_mask.shape[0]):
            return f"loss record {k + 1}: {len(completions)} completions for {record.completion_mask.shape[0]} rows"
        for j, index in enumerate(completions):
            row = made[generation].row(rank, int(index))
            if row is None:
                return f"loss record {k + 1}, row {j + 1}: completion {index} is not in generation {generation}"
            out.append((generation, row, k, j))
    return out


def reward_stats(made: Mapping[int, Generation], rows: Iterable[tuple]) -> dict[str, Expectation]:
    """The reward statistics of section 3 over the completions `rows` name (each once). A mean over no score or
    a std over fewer than two is 0 with `count` 0: section 8 leaves such empty sets open."""
    unique = sorted({(g, row) for g, row, *_ in rows})
    if not unique:
        return {}
    names = made[unique[0][0]].names
    pick = lambda values: torch.stack([values(made[g])[row] for g, row in unique])  # noqa: E731
    rewards, zero_std = pick(lambda m: m.rewards), pick(lambda m: m.zero_std)
    scores = pick(lambda m: m.scores)
    out = {
        "reward": _stat("reward", nan_mean(rewards), rewards),
        "reward_std": _stat("reward_std", nan_std(rewards), rewards),
        "frac_reward_zero_std": Expectation("frac_reward_zero_std", float(zero_std.double().mean()), count=len(unique)),
    }
    for f, name in enumerate(names):
        column = scores[:, f]
        out[f"rewards/{name}/mean"] = _stat(f"rewards/{name}/mean", nan_mean(column), column)
        out[f"rewards/{name}/std"] = _stat(f"rewards/{name}/std", nan_std(column), column)
    return out


def _stat(metric: str, value: float, values: torch.Tensor) -> Expectation:
    """A statistic over the scored values; over too few of them (`count` 0) the contract's 0 (section 8)."""
    kept = values[~values.isnan()]
    scale = float(kept.abs().mean()) if kept.numel() else 0.0
    return Expectation(metric, 0.0 if math.isnan(value) else value, count=0 if math.isnan(value) else kept.numel(),
                       scale=scale)  # fmt: skip
