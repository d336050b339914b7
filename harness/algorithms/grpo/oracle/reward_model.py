"""A reward model's scores, as the GRPO oracle reads them from its head records.

docs/grpo-metrics.md ("A reward model's score"): a reward model scores the prompt followed by the
completion; the score is the model's scalar head at that sequence's last token. The completion is the
trainer's, as its mask has it (which `completion_mask` holds to the ids: a completion may end at a pad
the policy drew, or run on through it to its stop token). A trainer that scores decoded text may leave
out the stop token and the pads and other special tokens the completion held (decoding drops them; the
target names its tokenizer's in `RewardTap.watch`): the score is then the head at the last token left.
A target hands its trainer the model itself and has the tap watch it, which keeps each head forward's
output at every position with the ids of the rows it scored; the model's own `scores` are left NaN,
never taken.

The oracle reads each row's score so: the row's tokens are its ids less the pads (a position the
attention mask leaves out reads as pad); they must begin with one of the run's `prompts` (its pads
stripped), followed by the completion the row stands for (row i of a generation's call is completion i
of that rank's generation batch, as for a reward function), as given or as decoded; the score is the
head's output at the position of that sequence's last token. A causal model's output there does not
depend on what follows, so tokens after the completion change nothing. A row whose tokens are not a
prompt and its completion is a problem named by row (no score is read for it); a call without its ids,
or a row no loss record trained, makes the scores not recomputable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from harness.instrument.loss import RewardCall

from ..instruments import recorded


def prompt_tokens(prompts: torch.Tensor | None, pad: int) -> list[tuple[int, ...]]:
    """Each of the run's prompts as its tokens, pads stripped."""
    if prompts is None:
        return []
    return [tuple(t for t in row if t != pad) for row in torch.as_tensor(prompts).long().tolist()]


def score_position(row_ids: Sequence[int], completion: tuple[int, ...], prompts: list[tuple[int, ...]], stop: int,
                   pad: int, special: Sequence[int] = ()) -> int | None:  # fmt: skip
    """The position in `row_ids` of the scored sequence's last token (a prompt, then `completion` as given or as
    decoded text has it: without the pads and `special` tokens it held, with or without its final stop token),
    or None when the row is not one of the run's prompts followed by it."""
    kept = [i for i, t in enumerate(row_ids) if t != pad]
    tokens = [row_ids[i] for i in kept]
    dropped = {pad, *special} - {stop}
    endings = []
    for tokens_of in (completion, tuple(t for t in completion if t not in dropped)):  # decoded text drops them
        endings.append(tokens_of)
        if tokens_of and tokens_of[-1] == stop:
            endings.append(tokens_of[:-1])  # and the stop token
    for prompt in prompts:
        if tuple(tokens[: len(prompt)]) != prompt:
            continue
        for ending in endings:
            end = len(prompt) + len(ending)
            if tuple(tokens[len(prompt) : end]) == ending and end >= 1:
                return kept[end - 1]
    return None


def masked_completions(records) -> dict[tuple[int, int, int], tuple[int, ...]] | str:
    """(generation, rank, row of its generation batch) -> the completion's tokens under the trainer's mask (which
    `completion_mask` holds to the ids: a completion may end at a pad the policy drew, or run on through it); or
    why the loss records do not say."""
    out: dict[tuple[int, int, int], tuple[int, ...]] = {}
    for k, record in enumerate(records):
        if record.completions is None or record.completion_ids is None:
            return f"loss record {k + 1} does not say which completions its rows are, or keeps no token ids"
        ids, mask = torch.as_tensor(record.completion_ids).long(), torch.as_tensor(record.completion_mask).bool()
        for j, place in enumerate(torch.as_tensor(record.completions).reshape(-1).tolist()):
            key = (int(record.generation), int(record.rank), int(place))
            out.setdefault(key, tuple(int(t) for t in ids[j][mask[j]].tolist()))
    return out


def resolved(ran, spec) -> tuple[tuple[RewardCall, ...], list[str]] | str:
    """The run's reward calls with each reward model's scores read from its head records (module docstring),
    and the problems found (a row that is not its completion, by name); or why they cannot be read."""
    calls = tuple(recorded(ran).reward_calls or ())
    watched = [c for c in calls if c.head is not None]
    if not watched:
        return calls, []
    stop, pad = int(ran.stop_token_id), int(ran.pad_token_id)
    sampled = masked_completions(recorded(ran).loss_inputs or ())
    if isinstance(sampled, str):
        return sampled
    prompts = prompt_tokens(getattr(ran, "prompts", None), pad)
    if not prompts:
        return "the target exposes no `prompts`, so the rows a reward model scored cannot be read"
    out, problems = [], []
    for call in calls:
        if call.head is None:
            out.append(call)
            continue
        if call.input_ids is None:
            return f"the reward model {call.function!r}'s head was recorded without the ids it scored"
        ids, head = torch.as_tensor(call.input_ids).long(), torch.as_tensor(call.head).double()
        if ids.shape != head.shape:
            return (
                f"the reward model {call.function!r}'s head output {tuple(head.shape)} is not one per input id "
                f"{tuple(ids.shape)}"
            )
        scores = torch.full((len(ids),), float("nan"), dtype=torch.float64)
        on = f"rank {call.rank}, " if int(call.rank) else ""
        for row, row_ids in enumerate(ids.tolist()):
            completion = sampled.get((int(call.generation), int(call.rank), row))
            if completion is None:
                return (f"{on}generation {call.generation}: row {row} the reward model scored is in no loss record, "
                        f"so which completion it is is unknown")  # fmt: skip
            at = score_position(row_ids, completion, prompts, stop, pad, call.special_ids)
            if at is None:
                problems.append(f"{on}generation {call.generation}, {call.function}, row {row}: the model scored "
                                f"{[t for t in row_ids if t != pad]}, which is not a prompt of the run followed by "
                                f"completion {row} {list(completion)}")  # fmt: skip
            else:
                scores[row] = head[row, at]
        out.append(dataclasses.replace(call, scores=scores))
    return tuple(out), problems
