"""The reward functions' inputs against what was sampled: each function scored the completion its row names.

The `advantages` and `reward_stats` checks recompute every reward and advantage from the scores
recorded at the reward functions, taking row i of a call's scores as completion i of its generation
batch (the order the trainer handed the completions over). A trainer that hands its reward
functions the completions in another order, or other completions (another rank's slice, tokens
past the stop token), and assigns the scores back by row gives every completion the score of
another, consistently: the advantages recompute. Here the token ids each call was given (the
target's `RewardTap.wrap(..., inputs=...)`) are held to the completion ids the loss records keep
for the same generation, rank and row, each cut after its first stop token and stripped of the
pads after it (a reward may be given a completion padded to the batch's width or trimmed to its
mask: the contract says a completion is its tokens up to and including the stop token).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.instrument.observe import ObservationCache
from harness.require import require
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult

from ..instruments import recorded
from ..runs import REWARDS, spec_for
from ..spec import GRPOSpec
from .preconditions import require_records

SHOWN = 3
"""Rows named one by one; the rest are counted."""


def completion_tokens(ids: Sequence[int], stop: int, pad: int) -> tuple[int, ...]:
    """A completion's tokens: up to and including its first stop token, the pads after its last token dropped."""
    out = list(ids)
    if stop in out:
        out = out[: out.index(stop) + 1]
    while out and out[-1] == pad:
        out.pop()
    return tuple(out)


def sampled_completions(records, stop: int, pad: int) -> dict[tuple[int, int, int], tuple[int, ...]] | str:
    """(generation, rank, row of its generation batch) -> the completion's tokens, from the loss records; or why
    the records do not say."""
    out: dict[tuple[int, int, int], tuple[int, ...]] = {}
    for k, record in enumerate(records):
        if record.completions is None or record.completion_ids is None:
            return f"loss record {k + 1} does not say which completions its rows are, or keeps no token ids"
        ids = torch.as_tensor(record.completion_ids).long().tolist()
        for j, place in enumerate(torch.as_tensor(record.completions).reshape(-1).tolist()):
            out.setdefault((int(record.generation), int(record.rank), int(place)), completion_tokens(ids[j], stop, pad))
    return out


def input_problems(ran) -> tuple[list[str], int, int] | str:
    """(each wrong row's line, completions compared, reward calls with their inputs) of one rank's run; or why its
    records cannot say."""
    stop, pad = ran.stop_token_id, ran.pad_token_id
    calls = recorded(ran).reward_calls or ()
    given = [c for c in calls if c.completion_ids is not None]
    if not calls or not given:
        what = (
            "recorded no reward calls" if not calls else "recorded no reward call's inputs (RewardTap.wrap's `inputs`)"
        )
        return f"not recomputable: the target {what}, so what the reward functions scored is unknown"
    sampled = sampled_completions(recorded(ran).loss_inputs or (), stop, pad)
    if isinstance(sampled, str):
        return f"not recomputable: {sampled}"
    wrong, compared = [], 0
    for call in given:
        on = f"rank {call.rank}, " if int(call.rank) else ""
        if len(call.completion_ids) != len(call.scores):
            wrong.append(f"{on}generation {call.generation}, {call.function}: {len(call.completion_ids)} completions "
                         f"given, {len(call.scores)} scores returned")  # fmt: skip
            continue
        for row, ids in enumerate(call.completion_ids):
            want = sampled.get((call.generation, call.rank, row))
            if want is None:
                continue
            compared += 1
            got = completion_tokens(ids, stop, pad)
            if got != want:
                other = [i for (g, r, i), t in sampled.items() if (g, r) == (call.generation, call.rank) and t == got]
                instead = f"; it is completion {other[0]}'s" if other else ""
                wrong.append(f"{on}generation {call.generation}, {call.function}, row {row}: given {list(got)}, where "
                             f"completion {row} of the generation batch is {list(want)}{instead}")  # fmt: skip
    return wrong, compared, len(given)


def strip_pads(ids: Sequence[int], pad: int) -> tuple[int, ...]:
    """A prompt's tokens without the pads on either side (a trainer may pad prompts on the left or the right)."""
    out = list(ids)
    while out and out[0] == pad:
        out.pop(0)
    while out and out[-1] == pad:
        out.pop()
    return tuple(out)


def prompt_problems(ran, group: int) -> tuple[list[str], int] | None:
    """(each wrong call's line, calls compared) for the prompts the reward functions were given beside their
    completions: one per completion, the same for the `group` completions of a group, each a prompt of the run
    (its `prompts`), the same for every function of a generation; None when the target recorded no prompts."""
    calls = [c for c in recorded(ran).reward_calls or () if c.prompt_ids is not None]
    if not calls:
        return None
    pad = ran.pad_token_id
    known = None
    if ran.prompts is not None:
        known = {strip_pads(row, pad) for row in torch.as_tensor(ran.prompts).long().tolist()}
    wrong, first = [], {}
    for call in calls:
        on = f"rank {call.rank}, " if int(call.rank) else ""
        where = f"{on}generation {call.generation}, {call.function}"
        given = [strip_pads(row, pad) for row in call.prompt_ids]
        if len(given) != len(call.scores):
            wrong.append(f"{where}: {len(given)} prompts given beside {len(call.scores)} completions")
            continue
        mixed = [k for k in range(0, len(given), group) if len(set(given[k : k + group])) > 1]
        if mixed:
            wrong.append(f"{where}: the completions of group {mixed[0] // group} were given different prompts "
                         f"(a group's {group} completions share one)")  # fmt: skip
        unknown = [i for i, g in enumerate(given) if known is not None and g not in known]
        if unknown:
            wrong.append(f"{where}, row {unknown[0]}: given {list(given[unknown[0]])}, not a prompt of the run")
        before = first.setdefault((call.generation, call.rank), (call.function, given))
        if before[1] != given:
            wrong.append(f"{where}: given other prompts than {before[0]} for the same completions")
    return wrong, len(calls)


def judge_prompts(check: Check, found: tuple[list[str], int] | None) -> None:
    """Fail `check` with the first wrong calls, or note what was compared; a note when no prompt was recorded."""
    if found is None:
        check.note("the target recorded no prompts given to its reward functions (RewardTap.wrap's `prompts`): "
                   "not checked")  # fmt: skip
        return
    wrong, calls = found
    for line in wrong[:SHOWN]:
        check.fail(line)
    if len(wrong) > SHOWN:
        check.fail(f"... and {len(wrong) - SHOWN} more calls given wrong prompts")
    if not wrong:
        check.note(f"{calls} reward calls given one prompt per completion, shared by each group, each of the run")


def judge_inputs(check: Check, wrong: list[str], compared: int, calls: int) -> None:
    """Fail `check` with the first wrong rows by name and the rest counted, or note what was compared; fail it
    when nothing was."""
    if not require(check, compared or wrong, "no reward call scored a completion the loss records keep"):
        return
    for line in wrong[:SHOWN]:
        check.fail(line)
    if len(wrong) > SHOWN:
        check.fail(f"... and {len(wrong) - SHOWN} more: {len(wrong)} of {compared} scored completions are not the "
                   f"completion their row names: each score is assigned to another completion than it "
                   f"scored")  # fmt: skip
    if not wrong:
        check.note(f"{compared} scored completions, {calls} reward calls: each the completion its row names")


def reward_inputs(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Every completion a reward function was given is the completion its row names, as the loss records keep it;
    where the target records them, the prompts beside them are one per completion, shared by each group, each a
    prompt of the run."""
    check = Check(case.id)
    obs = cache.get(spec_for(REWARDS, run), spy=False)
    if require_records(obs, check) is None:
        return check.finish()
    found = input_problems(obs.ran)
    if isinstance(found, str):
        check.fail(found)
    else:
        judge_inputs(check, *found)
        judge_prompts(check, prompt_problems(obs.ran, obs.spec.num_generations))
    return check.finish()


REWARD_INPUT_SCENARIOS = (
    Scenario("reward_inputs", reward_inputs, (),
             "the advantages run: every completion a reward function was given == the one its row names, from the ids; "
             "the prompts beside them one per group, each of the run"),
)  # fmt: skip
