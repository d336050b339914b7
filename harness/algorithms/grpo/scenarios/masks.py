"""The completion mask recomputed from the completion ids and the stop token (docs/grpo-metrics.md, "mask").

Every other GRPO check takes the mask the loss used as the definition of a completion's tokens: its
lengths, its token means, its gradient. The contract defines it: each completion's tokens up to and
including its first stop token. Here each loss row's mask is held to that, from the row's own ids:

- s, the first stop token; the mask must cover positions 0..s (all T positions when there is none);
- a completion whose tokens include the pad before that may end its mask just before the first pad
  (a trainer that, like the reference, ends a completion at a pad it drew) or run on to s;
- a completion without the stop token may have an empty mask (TRL's `mask_truncated_completions`);
- nothing else: no position after the stop token (a mask one token past it trains on the pad after
  every completion that ended), no stop token left out (the stop token is not trained), no hole.

A row the mask gets wrong is named with what is wrong, as the trainer's fault: the trainer must mask
the contract's tokens. The run is the uneven-lengths run (`uneven_lengths`' own observation, so nothing
runs twice): completions that end at the stop token at uneven lengths, and some that run to the limit.

`completion_mask[mask_truncated_completions=True]` runs it with TRL's option on: a completion that ran to the
limit without the stop token (and drew no pad, where trainers may end it otherwise) must have an empty mask, the
run must hold one, and the gradient at its log-probs must follow the masks (0 on every token of an emptied row), so
that a trainer which ignores the option, or empties the recorded mask but trains on the truncated tokens, fails.
Its pooled statistics are not compared here: they follow the recorded masks as every pooled check's do, and TRL's
interval poolings (classes 16 and 18) would make this case a known failure of TRL's that hid its masking.
"""

from __future__ import annotations

import torch

from harness.errors import NotRecomputable
from harness.instrument.observe import ObservationCache
from harness.require import require
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult

from ..instruments import recorded
from ..oracle import gradients
from ..runs import UNEVEN, spec_for
from ..spec import GRPOSpec
from .gradients import judge
from .preconditions import definitions, require_records

SHOWN = 3
"""Rows named one by one; the rest are counted."""


def _first(hits: torch.Tensor) -> int | None:
    at = hits.nonzero()
    return int(at[0]) if at.numel() else None


def mask_problem(ids: torch.Tensor, mask: torch.Tensor, stop: int, pad: int, masked_truncated: bool = False) -> str:
    """What is wrong with one row's mask (the contract's rule, module docstring), or ''. `masked_truncated`: the
    run has mask_truncated_completions on, so a row whose pad comes before its stop token may also be empty (a
    trainer that ends a completion at a pad it drew sees no stop token in it: truncated)."""
    width, length = len(ids), int(mask.sum())
    if bool(mask[length:].any()) or not bool(mask[:length].all()):
        return f"its mask is not one run of positions from 0 (masked at {mask.nonzero().flatten().tolist()})"
    s, p = _first(ids == stop), _first(ids == pad)
    end = width if s is None else s + 1
    allowed = {end} | ({p} if p is not None and p < end else set()) | ({0} if s is None else set())
    if masked_truncated and p is not None and p < end:
        allowed.add(0)
    if length in allowed:
        return ""
    if s is not None and length > end:
        return (f"its mask runs {length - end} token(s) past its stop token at position {s}: it trains on tokens "
                f"after the completion ended")  # fmt: skip
    if s is not None and length == s and (p is None or p > s):
        return f"its mask leaves out its stop token at position {s}: the stop token is not trained"
    stop_at = f"its stop token is at position {s}" if s is not None else "it has no stop token"
    pad_at = f", its first pad at {p}" if p is not None else ""
    return f"its mask covers positions 0..{length - 1}, where {stop_at}{pad_at}"


def row_problems(records, stop: int, pad: int, masked_truncated: bool = False) -> tuple[list[str], int, int] | str:
    """(each wrong row's line, rows, rows holding the stop token before their last position) over `records`; or
    why they cannot be judged. `masked_truncated`: as mask_problem's."""
    wrong, rows, stopped = [], 0, 0
    for k, record in enumerate(records):
        if record.completion_ids is None:
            return f"not recomputable: loss record {k + 1} keeps no `completion_ids`"
        ids, mask = torch.as_tensor(record.completion_ids).long(), record.completion_mask.bool()
        if ids.shape != mask.shape:
            return f"loss record {k + 1}: completion_ids of shape {tuple(ids.shape)}, the mask {tuple(mask.shape)}"
        on = f"rank {record.rank}, " if int(record.rank) else ""
        for j in range(ids.shape[0]):
            rows += 1
            stopped += bool((ids[j, :-1] == stop).any())
            problem = mask_problem(ids[j], mask[j], stop, pad, masked_truncated)
            if problem:
                wrong.append(f"{on}loss record {k + 1} row {j + 1}: {problem}")
    return wrong, rows, stopped


def fail_rows(check: Check, wrong: list[str], rows: int) -> None:
    """Fail `check` with the first wrong rows by name, the rest counted."""
    for line in wrong[:SHOWN]:
        check.fail(line)
    if len(wrong) > SHOWN:
        check.fail(f"... and {len(wrong) - SHOWN} more: {len(wrong)} of {rows} loss rows masked otherwise than the "
                   f"contract (each completion's tokens up to and including its first stop token)")  # fmt: skip


def truncated_rows(records, stop: int, pad: int) -> tuple[list[str], int]:
    """(each truncated row left in the loss, truncated rows): the rows whose ids hold neither the stop token nor the
    pad (they ran to the limit, truncated by every trainer's reading) and whose mask is not empty."""
    kept, truncated = [], 0
    for k, record in enumerate(records):
        ids, mask = torch.as_tensor(record.completion_ids).long(), record.completion_mask.bool()
        for j in range(ids.shape[0]):
            if bool(((ids[j] == stop) | (ids[j] == pad)).any()):
                continue
            truncated += 1
            if bool(mask[j].any()):
                kept.append(f"loss record {k + 1} row {j + 1}: it ran to the limit without the stop token, and its "
                            f"mask holds {int(mask[j].sum())} tokens: mask_truncated_completions leaves it out of the "
                            f"loss")  # fmt: skip
    return kept, truncated


MASK_TRUNCATED = "mask_truncated_completions"
"""The case parameter of the run with TRL's option on."""


def masked_truncated(check: Check, cache: ObservationCache, obs, stop: int, pad: int) -> None:
    """With mask_truncated_completions: no truncated row in the loss, some truncated row in the run, and the
    gradient at the log-probs that of the recorded masks."""
    records = recorded(obs.ran).loss_inputs
    kept, truncated = truncated_rows(records, stop, pad)
    if not require(check, truncated, "no completion ran to the limit without the stop token: the run shows no "
                   "truncated completion to leave out"):  # fmt: skip
        return
    fail_rows(check, kept, truncated)
    check.note(f"{truncated} completions ran to the limit without the stop token, {len(kept)} of them in the loss")
    try:
        gap = gradients.gaps(records, gradients.WindowWeights.of(obs.spec, definitions=definitions(cache)))
    except NotRecomputable as why:
        check.fail(f"the gradient is not recomputable: {why}")
        return
    judge(check, gap, obs.spec, f"{obs.spec.split_label} {gap.where}")


def completion_mask(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Every loss row's mask covers its completion's tokens up to and including the first stop token (module
    docstring), from the row's ids; the run must show a completion that stopped before its last position. With
    `mask_truncated_completions=True`, also: every truncated completion's mask empty, and the gradient that of the
    masks."""
    check = Check(case.id)
    spec = spec_for(UNEVEN, run)
    if case.param(MASK_TRUNCATED):
        spec = spec.with_(name="mask_truncated", mask_truncated_completions=True)
    obs = cache.get(spec, spy=False)
    if require_records(obs, check) is None:
        return check.finish()
    stop, pad = obs.ran.stop_token_id, obs.ran.pad_token_id
    if not require(check, stop is not None, "the target does not say which token stops a completion "
                   "(`stop_token_id`)"):  # fmt: skip
        return check.finish()
    found = row_problems(recorded(obs.ran).loss_inputs, stop, pad, bool(case.param(MASK_TRUNCATED)))
    if isinstance(found, str):
        check.fail(found)
        return check.finish()
    wrong, rows, stopped = found
    if not require(check, stopped, f"of {rows} loss rows none holds the stop token before its last position: "
                   f"none shows where a completion's mask must end"):  # fmt: skip
        return check.finish()
    fail_rows(check, wrong, rows)
    if not wrong:
        check.note(f"{rows} loss rows, {stopped} with the stop token: every mask is the contract's")
    if case.param(MASK_TRUNCATED):
        masked_truncated(check, cache, obs, stop, pad)
    return check.finish()


MASK_SCENARIOS = (
    Scenario("completion_mask", completion_mask, (),
             "every loss row's mask == its tokens up to and including the first stop token, from its ids (also "
             "with mask_truncated_completions: each truncated completion's mask empty, the gradient follows)",
             ((), ((MASK_TRUNCATED, True),))),
)  # fmt: skip
