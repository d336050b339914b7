"""The steps every GRPO scenario takes before it judges anything: the run finished, logged, and recorded.

Each `require_*` records why on the `Check` it is given and returns None or False when the
run did not show what the scenario needs, so that a check that saw nothing never passes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from harness.compare import compare
from harness.instrument.loss import LossRecord
from harness.instrument.observe import Observation, ObservationCache
from harness.require import require_logged, require_ran, usable
from harness.unlogged import leave_out
from harness.verdict import Check

from ..contract import OPTIONAL, POLICY_LOSS
from ..definitions import CONFIGURED, GENERATION, LOGGING_CADENCE
from ..instruments import recorded
from ..runs import per_generation
from ..tolerances import TOLERANCES
from ..view import IntervalView, view_of
from ..wrong.poolings import diagnose_interval
from ..wrong.profiles import other_values


def require_logs(obs: Observation, names: Sequence[str], check: Check,
                 may_lack: Mapping[int, Sequence[str]] | None = None) -> bool:  # fmt: skip
    """True when the run finished with one log per interval; each log's metrics not logged as finite numbers among
    `names` fail the check, named (`require_logged`), without stopping it: the caller compares the rest (`usable`).
    `may_lack` maps a log's index to the names it may leave out (a note says so): the extremes of an interval with no
    token, which the contract logs as 0 and TRL leaves out (docs/grpo-metrics.md, section 8)."""
    ran = require_ran(obs, check)
    if ran is None:
        return False
    if len(ran.logs) != obs.spec.total_logs:
        check.fail(f"expected {obs.spec.total_logs} log(s) ({obs.spec.split_label}), saw {len(ran.logs)}")
        return False
    lacking = {}
    for i, logs in enumerate(ran.logs):
        lacking[i] = [n for n in (may_lack or {}).get(i, ()) if n in names and n not in logs]
        if lacking[i]:
            check.note(f"log {i + 1} has no token and leaves out {', '.join(lacking[i])} (the contract logs 0): "
                       f"not checked there")  # fmt: skip
    require_logged(check, ran.logs, names, obs.spec.split_label, "log", lacking)
    return True


def per_cadence(obs: Observation, check: Check, definitions: Sequence[tuple[str, Any]] = ()) -> Observation:
    """`obs` cut into the intervals its target declares it logs (`logging_cadence`, definitions.py): one every
    logging_steps optimizer steps ('configured', the default: `obs` itself), or one per generation ('generation': the
    spec's logging_steps made a generation's optimizer steps, `runs.per_generation`). Where the run logged as many
    times as the other cadence gives, and not as the declared one, a note names that profile (`require_logs` fails
    the count)."""
    declared = dict(definitions).get(LOGGING_CADENCE, CONFIGURED)
    cadenced = {CONFIGURED: obs.spec, GENERATION: per_generation(obs.spec)}
    judged = obs if declared == CONFIGURED else dataclasses.replace(obs, spec=cadenced[declared])
    logs = len(obs.ran.logs) if obs.ran is not None else None
    for words, theirs in other_values({LOGGING_CADENCE: declared}):
        other = cadenced[theirs[LOGGING_CADENCE]]
        if logs == other.total_logs != judged.spec.total_logs:
            check.note(f"{logs} log(s), one every {other.logging_steps} optimizer step(s): {words}")
            break
    return judged


def require_records(obs: Observation, check: Check,
                    definitions: Sequence[tuple[str, Any]] = ()) -> tuple[IntervalView, ...] | None:  # fmt: skip
    """The view of each interval (its loss as the target's `definitions` fix it), after checking there is a loss
    record per micro-batch the run must have made, each usable and no wider than `max_completion_length`, in windows
    of the sizes the spec says (one optimizer step per window)."""
    ran = require_ran(obs, check)
    if ran is None:
        return None
    records = recorded(ran).loss_inputs
    if not records:
        check.fail("the target recorded no loss inputs (`loss_inputs` is empty or absent)")
        return None
    view = view_of(obs, definitions)
    for i, problem in view.problems[:3]:
        check.fail(f"loss record {i + 1}: {problem}")
    if view.problems:
        return None
    sizes = window_sizes(records)
    gas = obs.spec.gradient_accumulation_steps
    if len(sizes) != obs.spec.max_steps or not all(1 <= n <= gas for n in sizes):
        check.fail(f"micro-batches per optimizer step {sizes}, expected {obs.spec.max_steps} windows of 1 to {gas} "
                   f"(the reference's: {obs.spec.run_windows()})")  # fmt: skip
        return None
    widest = max(int(r.completion_mask.shape[-1]) for r in records)
    if widest > obs.spec.max_completion_length:
        check.fail(f"loss records {widest} positions wide: a completion has at most max_completion_length="
                   f"{obs.spec.max_completion_length} tokens, so no record may be wider")  # fmt: skip
        return None
    rows = {int(r.completion_mask.shape[0]) for r in records}
    if rows != {obs.spec.per_device_train_batch_size}:
        check.fail(f"micro-batches of {sorted(rows)} rows, expected {obs.spec.per_device_train_batch_size}")
        return None
    return view.intervals


def window_sizes(records: Sequence[LossRecord]) -> list[int]:
    """Micro-batches of each optimizer step, from the records' window indices (0, 1, ... expected)."""
    windows = [int(r.window) for r in records]
    top = max(windows, default=-1)
    return [windows.count(w) for w in range(top + 1)] if min(windows, default=0) >= 0 else [-1]


def definitions(cache: ObservationCache) -> tuple[tuple[str, Any], ...]:
    """The definitions the cache's target declares its trainer implements (`Target.definitions`, resolved once),
    () for a cache of a bare factory (the default profile)."""
    return cache.target.definitions if cache.target is not None else ()


def declared(cache: ObservationCache) -> tuple[str, ...]:
    """The contract's optional metrics the cache's target declares it logs (`Target.optional_metrics`, read once when
    the target was resolved), () for none or for a cache of a bare factory."""
    return cache.target.optional_metrics if cache.target is not None else ()


def logged_names(logs: Sequence[Mapping[str, float]], names: Sequence[str], check: Check, declares: Sequence[str] = (),
                 where: str = "", unlogged: Sequence[str] = ()) -> tuple[str, ...]:  # fmt: skip
    """`names` less those the target declares its trainer does not log (`unlogged`, its `unlogged_metrics`:
    harness/unlogged.py `leave_out`), and less `policy_loss` when none of `logs` has it (TRL logs it only with an
    entropy bonus), said in a note; a failure instead when the target declares it logs it (`declares`, the
    factory's `optional_metrics`), and for a declared name the contract does not make optional. `where` names the
    run(s) the logs come from."""
    names = leave_out(check, logs, names, unlogged, where)
    unknown = [n for n in declares if n not in OPTIONAL]
    if unknown:
        check.fail(f"the target declares {', '.join(unknown)} among its optional metrics; the contract's optional "
                   f"metrics are {', '.join(OPTIONAL)}")  # fmt: skip
    if POLICY_LOSS in names and logs and not any(POLICY_LOSS in log for log in logs):
        if POLICY_LOSS in declares:
            check.fail(f"{POLICY_LOSS} is declared (the target's `optional_metrics`) but no log has it "
                       f"({where}; logged: {', '.join(sorted(logs[0]))})")  # fmt: skip
        else:
            check.note(f"{POLICY_LOSS} is not logged by this trainer ({where}): not checked")
        if names == (POLICY_LOSS,):
            check.not_applicable(f"{POLICY_LOSS} is not logged by this trainer")
        return tuple(n for n in names if n != POLICY_LOSS)
    return tuple(names)


def run_logs(obs: Observation) -> tuple[Mapping[str, float], ...]:
    """What the observed run logged; () where it did not finish."""
    return tuple(obs.ran.logs) if obs.ran is not None else ()


def compare_interval(obs: Observation, interval: IntervalView, check: Check, names: Sequence[str]) -> None:
    """The interval's logged `names` against the oracle fed that interval's records alone: those it logged as
    finite numbers (`require_logs` failed the check naming the others), each with its own verdict."""
    expected = interval.expected
    logged = obs.ran.logs[interval.index]
    where = f"log {interval.index + 1}" if obs.spec.total_logs > 1 else None
    names = usable(logged, names)
    verdicts = compare({n: logged[n] for n in names}, {n: expected[n] for n in names}, obs.spec.dtype, TOLERANCES,
                       where=where)  # fmt: skip
    check.absorb(diagnose_interval(verdicts, interval, obs.spec.dtype))


def untrained_micro_batches(records: Sequence[LossRecord], spec) -> str:
    """Why some micro-batch of a generation never ran, or ''. Each generation but a rank's last is trained in
    full, steps_per_generation * num_iterations micro-batches (the run may stop inside the last), whether or not
    the trainer's windows cross generations."""
    per_generation = spec.generation_steps * spec.num_iterations
    counts: dict[int, list[int]] = {}
    for record in records:
        generation = int(record.generation)
        if generation < 0:
            return "a loss record has no generation index"
        ran = counts.setdefault(int(record.rank), [])
        ran.extend([0] * (generation + 1 - len(ran)))
        ran[generation] += 1
    for rank, ran in sorted(counts.items()):
        if any(n != per_generation for n in ran[:-1]) or ran[-1] > per_generation:
            where = f" on rank {rank}" if len(counts) > 1 else ""
            return (f"micro-batches per generation {ran}{where}, expected {per_generation} "
                    f"(steps_per_generation * num_iterations) for every generation but the last")  # fmt: skip
    return ""


def _longest(record: LossRecord) -> int:
    """The most tokens any row of `record` keeps in its mask (0 for a record without rows)."""
    return int(record.completion_mask.sum(dim=1).max()) if record.completion_mask.numel() else 0


def regime_shown(check: Check, shown: int, of: int, what: str, regime: str, detail: str) -> bool:
    """Whether the run showed the regime a check exists for: `shown` of `of` `what` (a note, with `detail`), else a
    failure saying the run did not show `regime`, so that a regime case never passes on a run without its regime."""
    said = f"{shown} of {of} {what}"
    if not shown:
        check.fail(f"{said}: the run did not show {regime}")
        return False
    check.note(f"{said} ({detail})")
    return True


def require_short_generation(records: Sequence[LossRecord], spec, check: Check) -> bool:
    """Whether some generation's completions all end before max_completion_length (a note), else a failure: a
    trainer that pads a generation to its longest completion and divides by that width, where dr_grpo divides by
    the constant max_completion_length, shows only where no completion of the generation reaches the limit."""
    lengths: dict[tuple[int, int], int] = {}
    for record in records:
        key = (int(record.rank), int(record.generation))
        lengths[key] = max(lengths.get(key, 0), _longest(record))
    short = sorted(key for key, longest in lengths.items() if longest < spec.max_completion_length)
    what = f"generations whose every completion is shorter than max_completion_length ({spec.max_completion_length})"
    return regime_shown(check, len(short), len(lengths), what, "completions shorter than the maximum",
                        f"their longest {[lengths[k] for k in short]}")  # fmt: skip


def require_spanning_window(records: Sequence[LossRecord], spec, check: Check) -> bool:
    """Whether some optimizer step's micro-batches came from two generations (a note), else a failure: a trainer that
    takes a token-mean loss's count once per window, from its first micro-batch's generation, shows only there."""
    generations: dict[int, set[int]] = {}
    for record in records:
        generations.setdefault(int(record.window), set()).add(int(record.generation))
    spanning = [w for w, seen in sorted(generations.items()) if len(seen) > 1]
    first = f"window {spanning[0] + 1}: generations {sorted(generations[spanning[0]])}" if spanning else ""
    return regime_shown(check, len(spanning), len(generations), "windows whose micro-batches come from two generations",
                        "a window across generations", first)  # fmt: skip
