"""Partition invariance: at LR 0, Hypothesis draws splits of one local batch; the pooled means must not move.

No spy is needed: the same rollout cut into different `(per_device_train_batch_size,
gradient_accumulation_steps, num_mini_batches)` and run for 1 or 2 epochs logs the same
pooled means as the reference split 4, 3, 2, and `val/ratio_var == 0` at every split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import example, given, seed, settings
from hypothesis import strategies as st

from harness.compare import compare
from harness.instrument.observe import ObservationCache
from harness.invariance import CutRun, Knob, knob_findings
from harness.report.format import check_failure_lines
from harness.require import usable
from harness.unlogged import leave_out
from harness.verdict import Check, CheckId, CheckResult, CheckStatus, Diagnosis

from ..spec import ScenarioSpec
from ..tolerances import TOLERANCES
from .preconditions import require_logs

LOCAL_BATCH = 12
DIVISORS = [d for d in range(1, LOCAL_BATCH + 1) if LOCAL_BATCH % d == 0]
DRAW_SEED = 20261129
REFERENCE_SPLIT = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3, "num_mini_batches": 2}


@st.composite
def splits(draw) -> tuple[int, int, int, int]:
    """(per_device_train_batch_size, gradient_accumulation_steps, num_mini_batches, epochs) of a batch of 12."""
    bs = draw(st.sampled_from(DIVISORS))
    mb = draw(st.sampled_from(DIVISORS))
    epochs = draw(st.integers(1, 2))
    return bs, LOCAL_BATCH // bs, mb, epochs


def compare_splits(
    cache: ObservationCache, reference: ScenarioSpec, other: ScenarioSpec, check_id: CheckId,
    means: Sequence[str], variance: str, cuts: list[CutRun] | None = None, unlogged: Sequence[str] = (),
) -> CheckResult:  # fmt: skip
    """One drawn split against the reference split: the same pooled means, and a zero variance at both; `cuts` gets
    the split's knobs and the means it changed (harness/invariance.py). The metrics of `unlogged`, which the target
    declares its trainer does not log, are left out (harness/unlogged.py), the variance too."""
    check = Check(check_id)
    observed = [cache.get(spec, spy=False) for spec in (reference, other)]
    if not all([require_logs(o, means, check, unlogged) for o in observed]):
        return check.finish()
    first, second = observed
    for obs in observed:  # the LR-0 identity holds at every split, one micro-batch or many
        if leave_out(check, obs.ran.logs, (variance,), unlogged, obs.spec.split_label) != (variance,):
            break  # not logged, as declared (a note says so)
        logged = {variance: obs.ran.logs[0].get(variance, math.nan)}
        check.absorb(compare(logged, {variance: 0.0}, obs.spec.dtype, TOLERANCES, kind="identity",
                             where=obs.spec.split_label))  # fmt: skip
    means = usable(first.ran.logs[0], usable(second.ran.logs[0], means))  # require_logs named the others
    logged = {n: second.ran.logs[0][n] for n in means}
    verdicts = compare(logged, {n: first.ran.logs[0][n] for n in means}, second.spec.dtype, TOLERANCES,
                       kind="partition", where=second.spec.split_label)  # fmt: skip
    check.absorb(verdicts)
    if cuts is not None:
        changed = {m.name: (float(first.ran.logs[0][m.name]), float(logged[m.name])) for m in verdicts if m.failed}
        cuts.append(CutRun(knobs_of(second.spec), second.spec.split_label, changed))
    if check.failed:
        check.note(f"reference split {first.spec.split_label}")
    return check.finish()


def partition_invariance(
    cache: ObservationCache, base: ScenarioSpec, check_id: CheckId, means: Sequence[str], variance: str,
    unlogged: Sequence[str] = (),
) -> CheckResult:  # fmt: skip
    """Hypothesis draws splits (10 examples, seeded); a failure names every split that failed. `unlogged`: the
    metrics the target declares its trainer does not log, left out of every comparison."""
    reference = base.with_(**REFERENCE_SPLIT)
    verdicts: list[CheckResult] = []
    cuts: list[CutRun] = []

    # a fixed seed, so that the draws do not change when this function's source text does (derandomize
    # alone seeds from a digest of the source)
    @seed(DRAW_SEED)
    @settings(max_examples=10, deadline=None, derandomize=True, database=None)
    @given(splits())
    @example((12, 1, 1, 1))  # one micro-batch per update: val/ratio_var must be 0, not NaN
    @example((6, 2, 2, 1))  # two micro-batches: the smallest sample variance
    def invariant(split: tuple[int, int, int, int]) -> None:
        bs, gas, mb, epochs = split
        other = base.with_(per_device_train_batch_size=bs, gradient_accumulation_steps=gas, num_mini_batches=mb,
                           num_ppo_epochs=epochs)  # fmt: skip
        result = compare_splits(cache, reference, other, check_id, means, variance, cuts, unlogged)
        verdicts.append(result)
        assert result.passed, "\n".join(check_failure_lines(result))  # Hypothesis shrinks on AssertionError

    try:
        invariant()
    except AssertionError:
        pass  # reported through the failing verdict
    failing = [v for v in verdicts if not v.passed]
    if failing:
        unique = list({cut.label: cut for cut in cuts}.values())  # Hypothesis replays some splits while it shrinks
        return every_failing_split(check_id, failing, knob_findings(knobs_of(reference), unique, KNOBS))
    if verdicts:
        return verdicts[-1]
    check = Check(check_id)
    check.fail("Hypothesis ran no example")
    return check.finish()


def every_failing_split(
    check_id: CheckId, failing: list[CheckResult], findings: Sequence[Diagnosis] = ()
) -> CheckResult:
    """One result naming every split that failed (Hypothesis replays some while it shrinks: each is kept once), with
    the knobs the failing means depend on (`findings`, harness/invariance.py) as the check's diagnoses."""
    problems = list(dict.fromkeys(p for v in failing for p in v.problems))
    notes = list(dict.fromkeys(n for v in failing for n in v.notes)) + [d.formula for d in findings]
    metrics = list({(m.name, m.where): m for v in failing for m in v.metrics if m.failed}.values())
    return CheckResult(check_id, CheckStatus.FAIL, tuple(problems), tuple(notes), tuple(metrics), tuple(findings))


KNOBS = (Knob("per_device_train_batch_size", "the micro-batch size"), Knob("num_mini_batches", "the mini-batches"),
         Knob("num_ppo_epochs", "the epochs"))  # fmt: skip
"""The systems knobs a drawn split varies, as the check's findings name them (the accumulation steps follow from the
micro-batch size: a split holds the local batch of 12)."""


def knobs_of(spec: ScenarioSpec) -> dict[str, int]:
    """A run's settings of the systems knobs."""
    return {knob.key: getattr(spec, knob.key) for knob in KNOBS}
