"""What a GRPO target records at the reward functions it hands its trainer: every score, per generation.

A target wraps each reward function in `RewardTap.wrap` before handing it over. The wrapper calls
the function with the same arguments and returns what it returned; it keeps one frozen `RewardCall`
(loss.py) per call: its generation, rank, the function's name and its `index` (its place in the list
the trainer was handed: its weight's place), and its scores, NaN where the function could not score
the completion (it returned None or NaN). The rows are in the order the trainer handed the
completions to the function, which is the order of that rank's generation batch; a loss record's
`completions` say which of these rows each of its rows is. The target sets `generation` before each
generation's rewards are computed. With `inputs`, a function of the call's arguments that returns the
completions' token ids (a (N, T) tensor or N lists), the record keeps what the function was given too, so
the gate can hold the reward's inputs to what was sampled (`reward_inputs`); with `prompts`, the same for the
prompt ids given beside each completion (a function given None for its prompts is recorded as given none). A
reward model is not wrapped but watched (`RewardTap.watch`): its head's output at every position is kept with the
ids it scored, and the oracle reads the score (algorithms/grpo/oracle/reward_model.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .loss import RewardCall


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
    calls: list[RewardCall] = field(default_factory=list)
    wrapped: int = 0

    def wrap(self, name: str, func: Callable, inputs: Callable[[tuple, dict], Any] | None = None,
             prompts: Callable[[tuple, dict], Any] | None = None) -> Callable:  # fmt: skip
        """`func`, recording each call's scores under `name`; keeps its `__name__` (trainers name rewards by it).
        Wrap the functions in the order the trainer is handed them. `inputs(args, kwargs)`: the completions' token
        ids the call was given (module docstring), or None to record none; `prompts(args, kwargs)`: the prompts'
        token ids the call was given beside them, one row per completion, or None to record none."""
        index, self.wrapped = self.wrapped, self.wrapped + 1

        @functools.wraps(func)
        def recorded(*args, **kwargs):
            output = func(*args, **kwargs)
            given = None if inputs is None else as_ids(inputs(args, kwargs))
            beside = None if prompts is None else as_ids(prompts(args, kwargs))
            self.calls.append(RewardCall(self.generation, self.rank, name, index, as_scores(output), given,
                                         prompt_ids=beside))  # fmt: skip
            return output

        return recorded

    def watch(self, name: str, model: Any, pad_token_id: int, special_ids: tuple[int, ...] = ()) -> Any:
        """`model` itself, a reward model (a sequence-classification model: a backbone and a scalar head `score`,
        instrument/rewards.py), hooked so that each forward of its head is recorded under `name` with the ids of
        the rows it scored (a position the attention mask leaves out as `pad_token_id`) and the head's output at
        every position: the score is the oracle's to read there. `special_ids`: where the trainer scores decoded
        text, the token ids its decoding leaves out (the tokenizer's special tokens). Hand the trainer the model
        itself, in the order the functions are wrapped; the hooks stay for the model's life (one run's)."""
        import torch

        from .rewards import _argument, parts

        backbone, head = parts(model)
        index, self.wrapped = self.wrapped, self.wrapped + 1
        kept: list[Any] = []

        def keep_inputs(module, args, kwargs):
            kept[:] = [_argument("input_ids", 0, args, kwargs), _argument("attention_mask", 1, args, kwargs)]

        def record(module, args, output):
            values = (output[0] if isinstance(output, tuple) else output).detach()
            if values.dim() == 3 and values.shape[-1] == 1:
                values = values.squeeze(-1)
            ids, mask = kept if kept else (None, None)
            kept.clear()
            ids = None if ids is None else ids.detach().to("cpu", torch.int64)
            if ids is not None and mask is not None:
                ids = ids.masked_fill(~mask.detach().to("cpu").bool(), int(pad_token_id))
            rows = values.shape[0]
            self.calls.append(RewardCall(self.generation, self.rank, name, index,
                                         torch.full((rows,), math.nan, dtype=torch.float64),
                                         head=values.to("cpu", torch.float64).clone(), input_ids=ids,
                                         special_ids=tuple(int(t) for t in special_ids)))  # fmt: skip

        backbone.register_forward_pre_hook(keep_inputs, with_kwargs=True)
        head.register_forward_hook(record)
        return model


def as_ids(completions: Any) -> tuple[tuple[int, ...], ...]:
    """Completions' (or prompts') token ids ((N, T) tensor or N sequences) as a tuple of int tuples; None (nothing
    given) as ()."""
    if completions is None:
        return ()
    if isinstance(completions, torch.Tensor):
        completions = completions.detach().to("cpu").tolist()
    return tuple(tuple(int(t) for t in row) for row in completions)
