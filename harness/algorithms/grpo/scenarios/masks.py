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
"""

from __future__ import annotations

import torch

from harness.instrument.observe import ObservationCache
from harness.require import require
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult

from ..instruments import recorded
from ..runs import UNEVEN, spec_for
from ..spec import GRPOSpec
from .preconditions import require_records

SHOWN = 3
"""Rows named one by one; the rest are counted."""


def _first(hits: torch.Tensor) -> int | None:
    at = hits.nonzero()
    return int(at[0]) if at.numel() else None


def mask_problem(ids: torch.Tensor, mask: torch.Tensor, stop: int, pad: int) -> str:
    """What is wrong with one row's mask (the contract's rule, module docstring), or ''."""
    width, length = len(ids), int(mask.sum())
    if bool(mask[length:].any()) or not bool(mask[:length].all()):
        return f"its mask is not one run of positions from 0 (masked at {mask.nonzero().flatten().tolist()})"
    s, p = _first(ids == stop), _first(ids == pad)
    end = width if s is None else s + 1
    allowed = {end} | ({p} if p is not None and p < end else set()) | ({0} if s is None else set())
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


def row_problems(records, stop: int, pad: int) -> tuple[list[str], int, int] | str:
    """(each wrong row's line, rows, rows holding the stop token before their last position) over `records`; or
    why they cannot be judged."""
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
            problem = mask_problem(ids[j], mask[j], stop, pad)
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


def completion_mask(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Every loss row's mask covers its completion's tokens up to and including the first stop token (module
    docstring), from the row's ids; the run must show a completion that stopped before its last position."""
    check = Check(case.id)
    obs = cache.get(spec_for(UNEVEN, run), spy=False)
    if require_records(obs, check) is None:
        return check.finish()
    stop, pad = obs.ran.stop_token_id, obs.ran.pad_token_id
    if not require(check, stop is not None, "the target does not say which token stops a completion "
                   "(`stop_token_id`)"):  # fmt: skip
        return check.finish()
    found = row_problems(recorded(obs.ran).loss_inputs, stop, pad)
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
    return check.finish()


MASK_SCENARIOS = (
    Scenario("completion_mask", completion_mask, (),
             "every loss row's mask == its tokens up to and including the first stop token, from its ids"),
)  # fmt: skip
