"""The optimizer step, for any algorithm: each step's new weights recomputed in float64 from the records.

A trainer can hand its optimizer the right gradient and still not apply it as its optimizer says: its state
reset between steps (AdamW's moments zeroed and its bias correction restarted every update), its weights written
outside the step (a weight decay applied by hand as well), a setting changed while it runs. Every check that
stops at the gradient passes such a trainer. Here each real `optimizer.step()` of a run recorded with the
`.grad` copies (the gradient recorder keeps the weights before and after each step, and the optimizer's
settings: harness/instrument/optimizer_steps.py) is held to three things:

1. the weights move only in optimizer steps: those a step starts from are those the previous step left (the
   first step: those the run started with), bit for bit;
2. the settings no torch scheduler changes (eps, weight decay, amsgrad, maximize, nesterov, dampening) stay what
   they were at the first step, in every param group (the learning rate, betas and momentum may follow a
   schedule: the recomputation reads them at each step);
3. each weight the step left equals the float64 recomputation (harness/oracle/optimizer.py) from the weights it
   started from, the gradient it applied and the oracle's own running state from the first step it saw, within
   the tolerance derived there from the weights' dtype.

An optimizer the oracle does not know is not recomputable: the check fails saying so (a target declares the
kind of an optimizer that is no subclass of torch's with `factory.optimizer = "adamw"`, or the check not
applicable). Nothing here names an algorithm: each registers the scenario with the run it reads
(`optimizer_scenario`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from harness.errors import NotRecomputable
from harness.instrument.grad_trace import GradTrace
from harness.instrument.observe import grad_copies
from harness.oracle.optimizer import Optimizer, kind_of
from harness.oracle.precision import unit_roundoff
from harness.require import require_ran
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult, Diagnosis, MetricStatus, MetricVerdict, Wording

NAME = "optimizer_step"
METRIC = "optimizer/step"
FIXED = ("eps", "weight_decay", "amsgrad", "maximize", "nesterov", "dampening", "decoupled_weight_decay")
"""The param group settings no torch scheduler changes (the learning rate follows every scheduler, betas and
momentum OneCycleLR's and CyclicLR's cycle_momentum)."""
STATE_RESET = 65
"""docs/bug-catalogue.md's class of an optimizer state reset during the run."""
OUTSIDE = 66
"""docs/bug-catalogue.md's class of weights written outside the optimizer step."""


def _moved(before: tuple, after: tuple) -> list[int]:
    """The parameters whose weights differ between `before` and `after` (the same tensor is the same weights)."""
    return [i for i, (a, b) in enumerate(zip(before, after)) if a is not b and not torch.equal(a, b)]


def _continuity(trace: GradTrace, check: Check, where: str) -> None:
    """Rule 1: the weights a step starts from are those the previous step (or the run's start) left."""
    last, since = trace.start, "the run's start"
    for k, update in enumerate(trace.updates):
        moved = [] if last is None else _moved(last, update.before)
        if moved:
            check.fail(f"{where}step {k + 1}: the weights of parameter(s) {moved[:6]} changed between {since} and "
                       "the step, outside the optimizer")  # fmt: skip
            check.diagnose(Diagnosis((OUTSIDE,), f"weights written outside the optimizer before step {k + 1}",
                                     math.nan, math.nan))  # fmt: skip
            return
        last, since = update.after, f"step {k + 1}"


def _settings(trace: GradTrace, check: Check, where: str) -> None:
    """Rule 2: the settings of FIXED are, at every step, those of the first step."""
    first = trace.updates[0].groups
    for k, update in enumerate(trace.updates[1:], start=2):
        for g, (was, now) in enumerate(zip(first, update.groups)):
            changed = [key for key in FIXED if was.get(key) != now.get(key)]
            if changed:
                key = changed[0]
                check.fail(f"{where}step {k}: param group {g}'s {key} is {now.get(key)!r}, {was.get(key)!r} at step 1 "
                           "(a setting changed while the run trained)")  # fmt: skip
                return


def _count_note(update, k: int, oracle: Optimizer, check: Check, where: str) -> None:
    """Diagnose a state reset: the optimizer's own step count behind the steps it applied (once)."""
    for i, count in enumerate(update.counts):
        taken = oracle.steps_taken(i)
        if update.has_grad[i] and update.group_of[i] is not None and taken and (count or 0) < taken:
            check.diagnose(Diagnosis((STATE_RESET,), f"{where}the optimizer's own step count for parameter {i} was "
                                     f"{count or 0:g} before step {k + 1}, after {taken} steps: its state was reset",
                                     math.nan, math.nan))  # fmt: skip
            return


def _verdict(status: MetricStatus, reason: str, where: str, worst: tuple | None = None) -> MetricVerdict:
    if worst is None:
        return MetricVerdict(METRIC, status, reason=reason, where=where or None, wording=Wording.CHECK)
    logged, expected, tol = worst
    return MetricVerdict(METRIC, status, logged=logged, expected=expected, abs_err=abs(logged - expected), tol=tol,
                         reason=reason, where=where or None, wording=Wording.CHECK)  # fmt: skip


def _recompute(trace: GradTrace, check: Check, declared: str | None, where: str) -> None:
    """Rule 3: every step's new weights against the float64 recomputation."""
    kind = kind_of(trace.updates[0].optimizer, declared)
    if kind is None:
        named = declared if declared is not None else trace.updates[0].optimizer[0]
        reason = (f"the optimizer {named!r} is none the oracle recomputes (AdamW, Adam, SGD); a target declares "
                  "the kind of one that is no subclass of torch's with factory.optimizer")  # fmt: skip
        check.absorb([_verdict(MetricStatus.NOT_RECOMPUTABLE, reason, where)])
        return
    oracle, largest, first = Optimizer(kind), (0.0, "", None), None
    for k, (step, update) in enumerate(zip(trace.steps, trace.updates)):
        if first is None:  # what went wrong first is what the diagnosis is about
            _count_note(update, k, oracle, check, where)
        for i, (before, after) in enumerate(zip(update.before, update.after)):
            group = update.group_of[i]
            if group is None or not update.has_grad[i]:  # the optimizer leaves it as it was
                expected, tol = before.double(), torch.zeros_like(before, dtype=torch.float64)
            else:
                expected, tol = oracle.step(i, before, step.grads[i], update.groups[group], unit_roundoff(after.dtype))
            gap = (after.to("cpu", torch.float64) - expected).abs().nan_to_num(nan=math.inf)
            ratio = torch.where(gap > 0, gap / tol, torch.zeros_like(gap)).nan_to_num(nan=math.inf)
            at = int(ratio.argmax()) if ratio.numel() else 0
            worst = float(ratio.flatten()[at]) if ratio.numel() else 0.0
            label = f"step {k + 1}, parameter {i} {tuple(after.shape)} element {at}"
            numbers = (float(after.flatten()[at]), float(expected.flatten()[at]), float(tol.flatten()[at]))
            if worst > 1.0 and first is None:
                first = (label, numbers, worst)
            if not worst <= largest[0]:
                largest = (worst, label, numbers)
    if first is not None:
        label, numbers, worst = first
        reason = (f"{kind}: first disagreement at {label}: the step left {numbers[0]:.9g}, the recomputation gives "
                  f"{numbers[1]:.9g} (tolerance {numbers[2]:.3g}, gap {worst:.3g} times it)")  # fmt: skip
        check.absorb([_verdict(MetricStatus.FAIL, reason, where, numbers)])
        return
    reason = f"{kind}: largest gap {largest[0]:.3g} times its tolerance" + (f", at {largest[1]}" if largest[1] else "")
    check.absorb([_verdict(MetricStatus.PASS, reason, where, largest[2])])


def judge_steps(trace: GradTrace, check: Check, declared: str | None = None, where: str = "") -> None:
    """Hold every optimizer step of `trace` (recorded with the copies) to the three rules of the module's docstring;
    `declared`: the optimizer's kind as the target declares it; `where` prefixes what it reports."""
    prefix = f"{where}: " if where else ""
    if not trace.copies:
        check.fail(f"{prefix}the run's gradient trace kept no copies: the check must get its run inside grad_copies()")
        return
    if not trace.steps or len(trace.updates) != len(trace.steps):
        check.fail(f"{prefix}{len(trace.steps)} optimizer steps seen, {len(trace.updates)} with their weights")
        return
    _continuity(trace, check, prefix)
    _settings(trace, check, prefix)
    try:
        _recompute(trace, check, declared, where)
    except NotRecomputable as why:
        check.absorb([_verdict(MetricStatus.NOT_RECOMPUTABLE, str(why), where)])


def declared_kind(cache: Any) -> str | None:
    """The optimizer kind the cache's target declares (`factory.optimizer`), None when it declares none."""
    declared = getattr(getattr(getattr(cache, "target", None), "factory", None), "optimizer", None)
    return declared if isinstance(declared, str) else None


def optimizer_scenario(spec_of: Callable[[Any], Any], run: str, spy: bool = False) -> Scenario:
    """The `optimizer_step` scenario of an algorithm: it reads the run `spec_of(run_spec)` (with the `.grad` copies;
    `spy` as the algorithm's other checks of that run ask for it, so that they share it), described as `run`."""

    def optimizer_step(cache, run_spec, case: Case) -> CheckResult:
        check = Check(case.id)
        with grad_copies():
            obs = cache.get(spec_of(run_spec), spy=spy)
        if require_ran(obs, check) is not None:
            judge_steps(obs.ran.grads, check, declared_kind(cache))
        return check.finish()

    summary = (f"{run}: each optimizer step's new weights == the float64 recomputation (AdamW, Adam, SGD) from "
               "the weights, .grad and its own state; no weight moves outside a step")  # fmt: skip
    return Scenario(NAME, optimizer_step, (), summary)
