"""What a GRPO target records at the reward functions it hands its trainer: every score, per generation.

A target wraps each reward function in `RewardTap.wrap` before handing it over. The wrapper calls
the function with the same arguments and returns what it returned; it keeps one reward-call
record per call (docs/architecture.md):

    {"generation": int, "rank": int, "function": name, "index": int, "scores": (N,) float64 CPU tensor}

`index` is the function's place in the list the trainer was handed (its weight's place), and a
score is NaN where the function could not score the completion (it returned None or NaN). The
rows are in the order the trainer handed the completions to the function, which is the order of
that rank's generation batch; a loss record's `completions` say which of these rows each of its
rows is. The target sets `generation` before each generation's rewards are computed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


def as_scores(output: Any) -> torch.Tensor:
    """A reward function's output as a float64 CPU tensor, None as NaN (TRL's convention for 'cannot score')."""
    if isinstance(output, torch.Tensor):
        return output.detach().to("cpu", torch.float64).reshape(-1).clone()
    return torch.tensor([math.nan if s is None else float(s) for s in output], dtype=torch.float64)


@dataclass
class RewardTap:
    """The reward-call records of one run (one rank); `generation` is the generation being scored."""

    rank: int = 0
    generation: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)
    wrapped: int = 0

    def wrap(self, name: str, func: Callable) -> Callable:
        """`func`, recording each call's scores under `name`; keeps its `__name__` (trainers name rewards by it).
        Wrap the functions in the order the trainer is handed them."""
        index, self.wrapped = self.wrapped, self.wrapped + 1

        @functools.wraps(func)
        def recorded(*args, **kwargs):
            output = func(*args, **kwargs)
            self.calls.append(
                {
                    "generation": self.generation,
                    "rank": self.rank,
                    "function": name,
                    "index": index,
                    "scores": as_scores(output),
                }  # fmt: skip
            )
            return output

        return recorded
