"""Each rollout row's score, as the oracle has it: from the reward model's head records, or as handed over.

docs/metrics.md, "The update": the score of a row is the reward model's head at the row's last
real token, the query followed by the response truncated after its stop token (for an empty
response, the last query token); or the value a reward callable returned. A run that exposes
its `reward_model` has every head forward recorded (`instrument/rewards.py`): the head's output
at every position of the rows it scored, and the token ids and attention mask they came with.
The oracle pairs those rows with the rollout's rows by their token ids (the response part: the
last T ids, a position the mask leaves out read as pad, against the rollout's truncated
response), reads the head at each row's last real token, and hands that score on wherever a
callable's scores go (objective/scores, objective/rlhf_reward, the rewards of the training
signal). What the records cannot settle is `Unscored`, with the reason: a required metric that
is not recomputable, which fails the check; it is never a guess.

Pairing: when the scored rows, in the order they were recorded, carry the rollout's responses
in the rollout's order, row i is rollout row i (the order the value-head records are read in
too). Otherwise each rollout row takes the scored rows whose response is its own; several such
rows (two prompts answered alike) are only fine when they all give the same score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from harness.instrument.records import RewardHeadCall
from harness.oracle.masks import truncated

from ..instruments import recorded
from ..view import UpdateView

if TYPE_CHECKING:
    from harness.instrument.observe import Ran


@dataclass(frozen=True)
class Unscored:
    """The scores of an update are unknown to the oracle although the run should have shown them: why."""

    reason: str


Scores = torch.Tensor | Unscored | None
"""One update's scores: one per rollout row, the reason they are unknown, or None (the run shows none)."""

TIE = 1e-6
"""Scores of rows with the same response that differ by less than this (relative to 1 + the larger) are one score:
float32 rounding of one row scored in two batches is about 1e-7; a different query moves it by far more."""
NO_RECORD = (
    "the target exposes `reward_model` but no reward-head forward was recorded in this update, so the scores the "
    "trainer used are unknown"
)


@dataclass(frozen=True)
class ScoredRows:
    """Every row the reward head scored in one update: its response ids and its head output at each position."""

    responses: torch.Tensor
    """(M, T) the last T input ids of each row, a position the attention mask leaves out read as pad."""
    outputs: tuple[torch.Tensor, ...]
    """Each row's head output per position, (W,) (rows of different records may differ in width W)."""
    query_width: torch.Tensor
    """(M,) W - T of each row: where its response part begins."""


def scored_rows(records: Sequence[RewardHeadCall], width: int, pad: int, where: str) -> ScoredRows | Unscored:
    """The rows of `records` (inputs W > `width` ids wide), response part split off; Unscored otherwise."""
    responses, outputs, query_width = [], [], []
    for record in records:
        ids, values = record.input_ids, record.values
        if ids is None:
            return Unscored(f"{where}: a reward-head forward was recorded without the input ids of its rows")
        if values.dim() != 2 or tuple(values.shape) != tuple(ids.shape):
            return Unscored(
                f"{where}: reward-head output of shape {tuple(values.shape)} for input ids of shape "
                f"{tuple(ids.shape)} (expected one value per input position)"
            )
        if ids.shape[1] <= width:
            return Unscored(f"{where}: reward-model rows {ids.shape[1]} wide hold no query before {width} response ids")
        mask = record.attention_mask
        if mask is not None and mask.shape == ids.shape:
            ids = torch.where(mask, ids, torch.full_like(ids, pad))
        responses.append(ids[:, ids.shape[1] - width :])
        outputs.extend(values.unbind(0))
        query_width += [ids.shape[1] - width] * ids.shape[0]
    return ScoredRows(torch.cat(responses), tuple(outputs), torch.tensor(query_width))


def pairing(scored: torch.Tensor, rollout: torch.Tensor) -> list[list[int]]:
    """For each rollout row, the scored rows that carry its response (the row itself when the orders agree)."""
    if scored.shape == rollout.shape and torch.equal(scored, rollout):
        return [[i] for i in range(rollout.shape[0])]
    same = (rollout.unsqueeze(1) == scored.unsqueeze(0)).all(dim=-1)
    return [same[i].nonzero().flatten().tolist() for i in range(rollout.shape[0])]


def expected_scores(update: UpdateView, pad: int, stop: int | None) -> Scores:
    """(N,) the head's output at each rollout row's last real token, float64; Unscored with the reason."""
    where = f"update {update.index}"
    if update.rollout is None:
        return Unscored(update.rollout_problem or f"{where}: no rollout records")
    records = [r for r in update.ignored if isinstance(r, RewardHeadCall)]
    if not records:
        return Unscored(f"{where}: {NO_RECORD}")
    rollout = update.rollout
    width = rollout.responses.shape[1]
    rows = scored_rows(records, width, pad, where)
    if isinstance(rows, Unscored):
        return rows
    last = rollout.response_mask.sum(dim=-1) - 1  # -1 for an empty response: the last query token is read
    out = torch.empty(rollout.samples, dtype=torch.float64)
    for i, candidates in enumerate(pairing(rows.responses, truncated(rollout.responses, stop, pad))):
        if not candidates:
            return Unscored(
                f"{where}: rollout row {i}'s response (truncated at the stop token) is in no row the reward model "
                f"scored ({rows.responses.shape[0]} rows recorded)"
            )
        found = torch.stack([rows.outputs[j][int(rows.query_width[j] + last[i])] for j in candidates])
        if float((found - found[0]).abs().max()) > TIE * (1 + float(found.abs().max())):
            return Unscored(
                f"{where}: rollout row {i}'s response was scored in {len(candidates)} rows with different scores "
                f"(another prompt answered alike, out of order): which is its own is ambiguous"
            )
        out[i] = found[0]
    return out


def text_problem(update: UpdateView, seen: Any, ran: Ran) -> str | None:
    """Why the strings a reward on text was given in `update` are not the rollout's, decoded; None when they are.

    docs/metrics.md, "The update": such a reward scores each row's prompt and its response truncated after the
    stop token, both decoded without special tokens (pad, stop). The responses must be the rollout's rows in
    order; each prompt must be one of the run's prompts (the rollout records no prompt ids to pair it with).
    """
    where = f"update {update.index}"
    if update.rollout is None:
        return update.rollout_problem or f"{where}: no rollout records"
    tokenizer = recorded(ran).tokenizer
    if tokenizer is None or not hasattr(tokenizer, "batch_decode"):
        return f"{where}: the run shows the strings its reward on text was given but no `tokenizer` to check them"
    prompts, texts = seen
    responses = truncated(update.rollout.responses, ran.stop_token_id, ran.pad_token_id)
    want = tokenizer.batch_decode(responses.tolist(), skip_special_tokens=True)
    if len(texts) != len(want):
        return f"{where}: the reward on text was given {len(texts)} responses for {len(want)} rollout rows"
    for i, (got, expected) in enumerate(zip(texts, want)):
        if got != expected:
            return (f"{where}: the reward on text was given response {i} as {got!r}; the rollout's row {i}, "
                    f"truncated after the stop token, decodes to {expected!r}")  # fmt: skip
    asked = ran.prompts
    if asked is None:
        return f"{where}: the run shows the strings its reward on text was given but not the prompts it had"
    known = set(tokenizer.batch_decode(asked.tolist(), skip_special_tokens=True))
    stray = [p for p in prompts if p not in known]
    if len(prompts) != len(texts) or stray:
        what = f"{stray[0]!r}, which decodes none of the run's prompts" if stray else f"{len(prompts)} prompts"
        return f"{where}: the reward on text was given {what} (for {len(texts)} responses)"
    return None


def update_scores(ran: Ran, updates: Sequence[UpdateView]) -> list[Scores]:
    """Each update's scores: the oracle's from the reward-head records when the run exposed its reward model, else
    the scores the run handed over (None for every update when it handed none, or not one tensor per update).
    A reward on text has its strings checked against the rollout first: wrong strings leave the scores Unscored."""
    kept = recorded(ran)
    if kept.reward_model:
        return [expected_scores(u, ran.pad_token_id, ran.stop_token_id) for u in updates]
    given = kept.scores
    scores: list[Scores] = list(given) if given and len(given) == len(updates) else [None] * len(updates)
    seen = kept.scored_texts
    if seen is None:
        return scores
    if len(seen) != len(updates):
        reason = Unscored(f"the reward on text was called {len(seen)} times in {len(updates)} updates")
        return [reason] * len(updates)
    problems = [text_problem(u, s, ran) for u, s in zip(updates, seen)]
    return [score if problem is None else Unscored(problem) for score, problem in zip(scores, problems)]


def joined(per_rank: Sequence[Scores]) -> Scores:
    """One update's scores over every rank (in rank order): the first reason any rank's are unknown, else None
    when some rank shows none."""
    reason = next((s for s in per_rank if isinstance(s, Unscored)), None)
    if reason is not None:
        return reason
    if any(s is None for s in per_rank):
        return None
    return torch.cat([torch.as_tensor(s, dtype=torch.float64).reshape(-1) for s in per_rank])
