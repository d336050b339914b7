"""The learning-rate schedule, the weight decay and the optimizer's settings, for any algorithm: each step's against
the declared ones.

`optimizer_step` (optimizer.py) recomputes each step from the settings the step used, read from the optimizer's
param groups: it takes them on trust. A trainer whose scheduler advances at every backward pass instead of every
optimizer step, steps before the optimizer (each step at the next one's rate), ignores the warm-up, or builds its
optimizer without the configured weight decay, betas or eps passes it. Here, from the same records (the param
groups as each step used them, harness/instrument/optimizer_steps.py), against the schedule the run declares (its
kind, base rate, warm-up and steps; harness/oracle/schedules.py) and the settings it declares:

1. `optimizer/lr`: every param group's learning rate at the run's k-th step (0-based) is rate(k), within
   RATE_TOL of the base rate;
2. `optimizer/weight_decay` (where the run declares a non-zero decay): every group's weight decay is the declared
   one or 0, and the groups at the declared one hold more than half of the weights' elements. Leaving some
   weights undecayed is a definition: transformers' Trainer decays neither biases nor norm weights
   (`get_decay_parameter_names`), a small share of any model's elements; decaying none is not;
3. `optimizer/settings` (where the run declares them: AdamW's `betas` and `eps`, say): every group's setting of
   each declared key equals the declared one at every step, within SETTING_TOL. `optimizer_step` recomputes each
   step from the betas and eps its group holds, so an optimizer built at torch's defaults instead of the
   configured ones passes there; a correct trainer has no other definition (transformers' Trainer hands `adam_beta1`,
   `adam_beta2` and `adam_epsilon` to its AdamW as they are);
4. `learning_rate` (the logged rate, where the run logs one): the log after the run's n-th step shows rate(n),
   the rate once the scheduler has stepped (as transformers' Trainer logs `_get_learning_rate()`), or rate(n - 1),
   the rate the interval's last step used: both are definitions in use, and the bugs of rule 1 move either.

On several ranks (verify-dist) each rank's steps are held so; a schedule that advanced once per process at each
optimizer step (accelerate's prepared scheduler counts its schedule in samples, so it steps world times) is
diagnosed. A run without steps, or whose param groups hold no learning rate, fails saying so. Nothing here names an
algorithm: each registers a scenario that hands over its run's trace, schedule and logs (`judge_schedule`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from harness.instrument.grad_trace import GradTrace
from harness.oracle.schedules import Schedule
from harness.verdict import Check, Diagnosis, MetricStatus, MetricVerdict, Wording

RATE = "optimizer/lr"
DECAY = "optimizer/weight_decay"
SETTINGS = "optimizer/settings"
LOGGED = "learning_rate"
RATE_TOL = 1e-6
"""Relative to the base rate. A scheduler computes each rate in float64 (about 1e-16 off, a chained one gathering
one rounding a step); a rate kept as a float32 tensor (a capturable optimizer's) is within 6e-8 of it. The bugs
move a rate by a step of the schedule: a quarter of the base in the gate's run."""
PER_BACKWARD = 89
"""docs/bug-catalogue.md's class of a schedule advanced at every backward pass instead of every optimizer step."""
AHEAD = 90
"""docs/bug-catalogue.md's class of a scheduler stepped before the optimizer (each step at the next one's rate)."""
NO_DECAY = 91
"""docs/bug-catalogue.md's class of an optimizer built without the configured weight decay."""
SETTING_TOL = 1e-6
"""Relative to the declared setting. A setting handed through is the declared float itself; one kept as a float32
tensor is within 6e-8 of it. The bug moves it to torch's default: betas (0.9, 0.999) and eps 1e-8 against the
gate's (0.8, 0.99) and 1e-6."""
UNCONFIGURED = 96
"""docs/bug-catalogue.md's class of an optimizer built without the configured settings (its betas or eps)."""
PER_PROCESS = 92
"""docs/bug-catalogue.md's class of a schedule advanced once per process at each optimizer step (accelerate's prepared
scheduler, its schedule counted in samples)."""


def _verdict(name: str, status: MetricStatus, reason: str, numbers: tuple | None = None,
             diagnosis: Diagnosis | None = None) -> MetricVerdict:  # fmt: skip
    if numbers is None:
        return MetricVerdict(name, status, reason=reason, wording=Wording.CHECK, diagnosis=diagnosis)
    logged, expected, tol = numbers
    return MetricVerdict(name, status, logged=logged, expected=expected, abs_err=abs(logged - expected), tol=tol,
                         reason=reason, wording=Wording.CHECK, diagnosis=diagnosis)  # fmt: skip


def _at(verdict: MetricVerdict, where: str) -> MetricVerdict:
    return dataclasses.replace(verdict, where=where) if where else verdict


def _rates(trace: GradTrace) -> list[list[float]] | str:
    """Each step's learning rate per param group, or why they cannot be read."""
    rates = []
    for k, update in enumerate(trace.updates):
        row = [group.get("lr") for group in update.groups]
        if not row or any(not isinstance(lr, float) for lr in row):
            return f"step {k + 1}: the optimizer's param groups hold no learning rate ({row})"
        rates.append(row)
    return rates


def _explains(rates: list[list[float]], steps_of, schedule: Schedule, tol: float) -> bool:
    return all(abs(lr - schedule.rate(steps_of(k))) <= tol for k, row in enumerate(rates) for lr in row)


def _rate_diagnosis(rates: list[list[float]], trace: GradTrace, schedule: Schedule, tol: float,
                    world: int) -> Diagnosis | None:  # fmt: skip
    """The known bug whose schedule gives every rate seen, if one does (`world`: the processes of the run)."""
    if world > 1 and _explains(rates, lambda k: k * world, schedule, tol):
        return Diagnosis((PER_PROCESS,), f"the schedule advanced once per process at each optimizer step: step k "
                         f"used the rate of step {world} k", math.nan, math.nan)  # fmt: skip
    passes = [0]
    for step in trace.steps:
        passes.append(passes[-1] + len(step.backward_ids))
    for count, which in ((passes, "before it"), (passes[1:], "up to its own")):
        if _explains(rates, count.__getitem__, schedule, tol):
            return Diagnosis((PER_BACKWARD,), "the schedule advanced at every backward pass: each step used the rate "
                             f"of the count of backward passes {which}", math.nan, math.nan)  # fmt: skip
    if _explains(rates, lambda k: k + 1, schedule, tol):
        return Diagnosis((AHEAD,), "the scheduler stepped before the optimizer: step k used the rate of step k + 1",
                         math.nan, math.nan)  # fmt: skip
    return None


def judge_rates(trace: GradTrace, schedule: Schedule, world: int = 1) -> MetricVerdict:
    """Rule 1: each step's rate in every param group against the declared schedule."""
    rates = _rates(trace)
    if isinstance(rates, str):
        return _verdict(RATE, MetricStatus.FAIL, rates)
    tol, worst = RATE_TOL * schedule.base, (-1.0, 0.0, 0.0)
    for k, row in enumerate(rates):
        for g, lr in enumerate(row):
            if abs(lr - schedule.rate(k)) > worst[0]:
                worst = (abs(lr - schedule.rate(k)), lr, schedule.rate(k))
            if not abs(lr - schedule.rate(k)) <= tol:
                seen = ", ".join(f"{r[0]:.6g}" for r in rates)
                return _verdict(RATE, MetricStatus.FAIL,
                                f"step {k + 1}, param group {g}: the learning rate {lr:.9g}, the schedule "
                                f"{schedule.label} gives {schedule.rate(k):.9g} (the steps' rates {seen}; expected "
                                f"{', '.join(f'{schedule.rate(i):.6g}' for i in range(len(rates)))})",
                                (lr, schedule.rate(k), tol),
                                _rate_diagnosis(rates, trace, schedule, tol, world))  # fmt: skip
    return _verdict(RATE, MetricStatus.PASS, f"the {len(rates)} steps' rates follow {schedule.label}: "
                    f"{', '.join(f'{r[0]:.6g}' for r in rates)}", (worst[1], worst[2], tol))  # fmt: skip


def judge_decay(trace: GradTrace, declared: float) -> MetricVerdict:
    """Rule 2: the param groups' weight decay against the declared one."""
    first = trace.updates[0]
    sizes = [0] * len(first.groups)
    for i, group in enumerate(first.group_of):
        if group is not None:
            sizes[group] += first.before[i].numel()
    decays = [group.get("weight_decay") for group in first.groups]
    other = [(g, d) for g, d in enumerate(decays) if d not in (0.0, declared)]
    decayed = sum(size for size, d in zip(sizes, decays) if d == declared)
    if other or not 2 * decayed > sum(sizes):
        why = (f"param group {other[0][0]}'s weight decay is {other[0][1]!r}" if other else
               f"the groups at the declared {declared:g} hold {decayed} of {sum(sizes)} elements")  # fmt: skip
        return _verdict(DECAY, MetricStatus.FAIL, f"{why}: the run declares weight decay {declared:g} (the groups' "
                        f"decays {decays}, elements {sizes})",
                        diagnosis=Diagnosis((NO_DECAY,), f"the optimizer's weight decay is not the configured "
                                            f"{declared:g}", math.nan, math.nan))  # fmt: skip
    return _verdict(DECAY, MetricStatus.PASS, f"{decayed} of {sum(sizes)} elements decayed at {declared:g} (the "
                    f"groups' decays {decays})", (declared, declared, 0.0))  # fmt: skip


def _numbers(value) -> tuple[float, ...] | None:
    """A setting as floats (a number or a tuple of numbers), or None."""
    items = value if isinstance(value, tuple | list) else (value,)
    if not items or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in items):
        return None
    return tuple(float(v) for v in items)


def judge_settings(trace: GradTrace, declared: Mapping[str, object]) -> MetricVerdict:
    """Rule 3: every param group's setting of each key of `declared` against the declared one, at every step."""
    wanted = {key: _numbers(want) for key, want in declared.items()}
    odd = [key for key, expected in wanted.items() if expected is None]
    if odd:
        raise ValueError(f"the declared {odd[0]} {declared[odd[0]]!r} is no number or tuple of numbers")
    worst = 0.0
    for k, update in enumerate(trace.updates):
        for g, group in enumerate(update.groups):
            for key, want in declared.items():
                have, expected = _numbers(group.get(key)), wanted[key]
                if have is None or len(have) != len(expected):
                    return _verdict(SETTINGS, MetricStatus.FAIL, f"step {k + 1}, param group {g}: no {key} like the "
                                    f"declared {want!r} among its settings ({sorted(group)})")  # fmt: skip
                errors = [abs(h - e) / abs(e) if e else abs(h) for h, e in zip(have, expected)]
                if not max(errors) <= SETTING_TOL:
                    return _verdict(SETTINGS, MetricStatus.FAIL,
                                    f"step {k + 1}, param group {g}: {key} {group.get(key)!r}, the run declares "
                                    f"{want!r}", diagnosis=Diagnosis((UNCONFIGURED,), f"the optimizer's {key} is not "
                                    f"the configured {want!r}", math.nan, math.nan))  # fmt: skip
                worst = max(worst, *errors)
    shown = ", ".join(f"{key} {want!r}" for key, want in declared.items())
    return _verdict(SETTINGS, MetricStatus.PASS, f"every param group at the declared {shown} at each of the "
                    f"{len(trace.updates)} steps", (worst, 0.0, SETTING_TOL))  # fmt: skip


def judge_logged(logs: Sequence[tuple[int, float]], schedule: Schedule) -> MetricVerdict:
    """Rule 4: each (optimizer steps so far, logged rate) against the rate after those steps or the last one's."""
    tol, kinds = RATE_TOL * schedule.base, set()
    for n, value in logs:
        after, last = schedule.rate(n), schedule.rate(max(n - 1, 0))
        if not (abs(value - after) <= tol or abs(value - last) <= tol):
            return _verdict(LOGGED, MetricStatus.FAIL,
                            f"logged after step {n}: {value:.9g}, the schedule {schedule.label} gives {after:.9g} "
                            f"after it and {last:.9g} at it", (value, after, tol))  # fmt: skip
        kinds.add("after the interval's last step" if abs(value - after) <= tol else "at the interval's last step")
    n, value = logs[-1]
    nearest = schedule.rate(n) if abs(value - schedule.rate(n)) <= tol else schedule.rate(max(n - 1, 0))
    return _verdict(LOGGED, MetricStatus.PASS, f"{len(logs)} logged rates follow {schedule.label}, each the rate "
                    f"{' or '.join(sorted(kinds))}", (value, nearest, tol))  # fmt: skip


def judge_schedule(trace: GradTrace, check: Check, schedule: Schedule, weight_decay: float,
                   logs: Sequence[tuple[int, float]] | None, where: str = "", world: int = 1,
                   settings: Mapping[str, object] | None = None) -> None:  # fmt: skip
    """Hold `trace`'s steps (recorded with the copies) to `schedule`, `weight_decay` and the declared `settings`
    (param-group keys and values: rule 3; None or empty: none declared), and the logged rates `logs` ((optimizer
    steps so far, rate) per log; None where the run logs none) to the schedule; `where` names the trace (a rank),
    `world` the processes of the run (for the diagnosis)."""
    prefix = f"{where}: " if where else ""
    if not trace.copies or not trace.updates or len(trace.updates) != len(trace.steps):
        check.fail(f"{prefix}{len(trace.steps)} optimizer steps seen, {len(trace.updates)} with their settings: "
                   "the schedule cannot be judged (the run must be recorded inside grad_copies())")  # fmt: skip
        return
    if len(trace.updates) != schedule.total:
        check.fail(f"{prefix}{len(trace.updates)} optimizer steps, the schedule's run {schedule.total}")
    verdicts = [judge_rates(trace, schedule, world)]
    if weight_decay:
        verdicts.append(judge_decay(trace, weight_decay))
    if settings:
        verdicts.append(judge_settings(trace, settings))
    if logs:
        verdicts.append(judge_logged(logs, schedule))
    else:
        check.note(f"{prefix}the run logs no learning rate: only the rates its steps used are held to the schedule")
    check.absorb([_at(v, where) for v in verdicts])
