"""The GRPO gate's invariance scenario, `partition`: one generation batch cut other ways logs the same statistics.

Whatever a trainer declares about how it pools a metric (definitions.py), the systems knobs (the micro-batch size,
the accumulation steps, the passes over a generation) must not move it; when one does, the check names the knob
(harness/invariance.py), a finding of its own. At learning rate 0 nothing a cut changes can move the weights, so
seven cuts compare the logging alone. With the weights moving (`run=clipping`), a cut changes what the logged
statistics are taken over only if the update itself depends on it: at one window the micro-batch size alone
varies, the step gradient of every loss type but bnpo does not depend on it, and the clip fractions of the
update's tokens must not either.
"""

from __future__ import annotations

from harness.compare import compare
from harness.errors import HarnessConfigError
from harness.instrument.observe import ObservationCache
from harness.invariance import CutRun, Knob, knob_findings
from harness.require import require, usable
from harness.scenario import Case, Scenario
from harness.unlogged import declared_unlogged
from harness.verdict import Check, CheckResult

from ..contract import CLIP_MEANS, lr0_identities, partition_names
from ..runs import CUTS, LR0, clipping, spec_for
from ..spec import GRPOSpec
from ..tolerances import TOLERANCES
from .preconditions import declared, logged_names, require_logs, run_logs

CLIPPING_CUTS = ((4, 2, 4, 2), (2, 4, 8, 2), (8, 1, 2, 2))
"""(per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation, num_iterations) of the
`run=clipping` point: the extremes run (two passes at LR 0.05, the first cut its own) in windows of 8 completions
cut into micro-batches of 4, 2 and 8. Whole windows only, so a trainer that cannot cut a short one runs it."""
BNPO = (
    "bnpo's step gradient is a mean of micro-batch means by its definition (docs/grpo-metrics.md), so its weights, "
    "and with them what it logs after a step, depend on the micro-batch size; its logging is held at LR 0 "
    "(partition)"
)

HALF = (
    "in half precision the update's rounding depends on the micro-batch's shape, and two passes at LR 0.05 carry it "
    "into every ratio: the reference trainer's kl moves 13% and a clip flag flips between its cuts (bfloat16, "
    "seed 0); float32 and float64 hold it, and partition holds the logging at LR 0 in every dtype"
)


def partition(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """At LR 0, one generation batch cut into other micro-batches, windows and passes logs the same metrics;
    no token is clipped. No records needed. `dropout=0.1`: the same with attention dropout in the models, where
    a trainer that lets dropout act clips tokens (old and new log-probs are two draws) and logs cut-dependent
    means. `run=clipping`: the extremes run, whose second pass clips tokens, at micro-batches of 4, 2 and 8 in the
    same windows logs the same metrics (the run must clip a token); not applicable under bnpo (BNPO) and in half
    precision (HALF)."""
    check = Check(case.id)
    moving = case.param("run", None) == "clipping"
    if moving:
        base = clipping(run)
        why = BNPO if base.loss_type == "bnpo" else HALF if base.dtype in ("bfloat16", "float16") else ""
        if why:
            check.not_applicable(why)
            return check.finish()
        cuts, knobs = CLIPPING_CUTS, KNOBS[:1]  # at one window the accumulation follows from the micro-batch size
    else:
        base = spec_for(LR0, run)
        base = base.with_(dropout=case.param("dropout", base.dropout))
        cuts, knobs = CUTS, KNOBS
    specs = []
    for bs, gas, spg, iters in cuts:
        spec = base.with_(per_device_train_batch_size=bs, gradient_accumulation_steps=gas,
                          steps_per_generation=spg, num_iterations=iters)  # fmt: skip
        steps = len(spec.window_sizes)
        specs.append(spec.with_(max_steps=steps, logging_steps=steps))
    observed = runnable(cache, specs, check)
    if len(observed) < 2:
        check.fail(f"only {len(observed)} of the {len(specs)} cuts could be run: nothing to compare")
        return check.finish()
    names = logged_names(run_logs(observed[0]), partition_names(base.beta, base.loss_type), check, declared(cache),
                         observed[0].spec.split_label, declared_unlogged(cache))  # fmt: skip
    if not all([require_logs(o, names, check) for o in observed]):
        return check.finish()
    first = observed[0].ran.logs[0]
    if moving:
        clipped = [n for n in usable(first, names) if n in CLIP_MEANS and float(first[n]) > 0]
        if not require(check, clipped, f"no token clipped at {observed[0].spec.split_label} (no clip mean above 0): "
                       "the run does not show a clip fraction taken per micro-batch"):  # fmt: skip
            return check.finish()
    cut_runs = []
    for obs in observed:
        log = obs.ran.logs[0]
        where = obs.spec.split_label
        if not moving:
            identities = {n: v for n, v in lr0_identities(base.loss_type).items() if n in usable(log, names)}
            check.absorb(compare(log, identities, obs.spec.dtype, TOLERANCES, kind="identity", where=where))
        if obs is not observed[0]:
            both = usable(first, usable(log, names))
            verdicts = compare({n: log[n] for n in both}, {n: first[n] for n in both}, obs.spec.dtype, TOLERANCES,
                               kind="partition", where=where)  # fmt: skip
            check.absorb(verdicts)
            changed = {m.name: (float(first[m.name]), float(log[m.name])) for m in verdicts if m.failed}
            cut_runs.append(CutRun(knobs_of(obs.spec, knobs), where, changed))
    for finding in knob_findings(knobs_of(observed[0].spec, knobs), cut_runs, knobs):
        check.diagnose(finding)
    if check.failed:
        check.note(f"reference cut {observed[0].spec.split_label}")
    return check.finish()


def runnable(cache: ObservationCache, specs: list[GRPOSpec], check: Check) -> list:
    """The observations of the cuts the target's trainer can run, the first (the reference cut) always: a later cut it
    refuses (a HarnessConfigError of its factory, e.g. windows 3+1 where a library cuts whole mini-batches only) is
    left out with a note naming it and the refusal, never silently."""
    observed = [cache.get(specs[0], spy=False)]
    for spec in specs[1:]:
        try:
            observed.append(cache.get(spec, spy=False))
        except HarnessConfigError as refused:
            check.note(f"cut {spec.split_label} not run: the target refuses it ({refused})")
    return observed


KNOBS = (Knob("per_device_train_batch_size", "the micro-batch size"),
         Knob("gradient_accumulation_steps", "the accumulation steps"),
         Knob("num_iterations", "the passes over a generation"))  # fmt: skip
"""The systems knobs `partition` varies, as its findings name them (at a fixed generation batch the micro-batches per
generation follow from the micro-batch size)."""


def knobs_of(spec: GRPOSpec, knobs=KNOBS) -> dict[str, int]:
    """A run's settings of the systems knobs."""
    return {knob.key: getattr(spec, knob.key) for knob in knobs}


PARTITION = Scenario("partition", partition, (),
                     "LR 0: one generation batch cut 7 ways logs the same metrics; no token clipped (also with "
                     "dropout; and two passes at LR 0.05 that clip tokens, at micro-batches of 4, 2 and 8 in the same "
                     "windows)",
                     ((), (("dropout", 0.1),), (("run", "clipping"),)))  # fmt: skip
"""The `partition` scenario, in the pooled family's tuple (pooled.py)."""
