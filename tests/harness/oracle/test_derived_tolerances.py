"""Tolerances derived from what was recorded (harness/oracle/precision.py), and failing by fit (harness/diagnose.py).

A bfloat16 run whose per-token values the trainer held in float32 (TRL's `bf16=True`, its default) is judged at
float32: the class-16 gaps that the old bfloat16 rows let through fail now, and name their class. A logged number
inside the tolerance that a known wrong pooling reproduces, and the contract's value does not, fails too.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.algorithms.grpo.oracle.expect import Settings
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.tolerances import TOLERANCES
from harness.diagnose import Candidate, better_fit
from harness.instrument.loss import LossRecord
from harness.live import check_interval
from harness.oracle.precision import FIT_RATIO, UNIT_ROUNDOFF, Precision, coarsest, fits_better, unit_roundoff
from harness.tolerances import close, tolerance
from harness.verdict import MetricStatus, MetricVerdict


def settings(dtype: str, beta: float = 0.04, loss_type: str = "dapo") -> Settings:
    return Settings.of(GRPOSpec(beta=beta, loss_type=loss_type, dtype=dtype))


def record(lengths, entropy, logps, ref_logps, held: str, window: int = 0) -> LossRecord:
    """One micro-batch of rows of the given lengths; per-token entropy, log-probs and reference log-probs are
    constants of each row, rounded to the dtype `held` says the trainer held them in."""
    width = max(lengths)
    mask = torch.arange(width) < torch.tensor(lengths).unsqueeze(1)
    dtype = getattr(torch, held)

    def rows(values):
        return torch.tensor(values, dtype=dtype).unsqueeze(1).expand(len(lengths), width).double()

    return LossRecord(generation=0, window=window, rank=0, completion_mask=mask, logps=rows(logps), old_logps=None,
                      ref_logps=rows(ref_logps), advantages=torch.linspace(-1, 1, len(lengths), dtype=torch.float64),
                      entropies=rows(entropy), held={"logps": held, "ref_logps": held, "entropies": held,
                                                     "advantages": "float32"})  # fmt: skip


def uneven(held: str) -> list[LossRecord]:
    """Two micro-batches of one window, 30 and 8 tokens, of different entropy and KL: their flat mean of means
    (class 16) is 0.3% off the token mean for entropy and 19% for kl."""
    return [record([15, 15], [2.8, 2.8], [-2.0, -2.0], [-2.2, -2.2], held),
            record([4, 4], [2.7, 2.7], [-2.0, -2.0], [-2.05, -2.05], held)]  # fmt: skip


def flat_mean(records, name: str) -> float:
    means = []
    for r in records:
        mask = r.completion_mask.double()
        if name == "entropy":
            values = r.entropies
        else:
            gap = r.ref_logps - r.logps
            values = torch.exp(gap) - gap - 1
        means.append(float((values * mask).sum() / mask.sum()))
    return sum(means) / len(means)


@pytest.mark.parametrize("name", ["entropy", "kl"])
def test_float32_terms_of_a_bfloat16_run_are_judged_at_float32(name):
    """The issue's case: a run in bfloat16 whose log-probs and entropies came out in float32. The flat mean of
    micro-batch means passed the old bfloat16 row; judged from the recorded dtype it fails, named class 16."""
    records = uneven("float32")
    s = settings("bfloat16")
    logged = flat_mean(records, name)
    result = check_interval([records], {name: logged}, s, 0, 1)
    verdict = {v.name: v for v in result.verdicts}[name]
    old_row = tolerance("*", "bfloat16", TOLERANCES)  # the row entropy and kl were judged by before
    assert close(logged, verdict.expected, old_row), "the old row let it through"
    assert verdict.status is MetricStatus.FAIL
    assert verdict.diagnosis is not None and verdict.diagnosis.classes == (16,)
    assert verdict.precision.dtype == "float32" and "float32 terms" in verdict.tol_source
    assert verdict.tol < 1e-3 * old_row.allowed(verdict.expected)


@pytest.mark.parametrize("held", ["float32", "bfloat16", "float16"])
def test_the_token_mean_passes_in_every_held_dtype(held):
    """A correct trainer: its token mean, computed the way a trainer does (sums in the held dtype), passes."""
    records = uneven(held)
    s = settings(held)
    dtype = getattr(torch, held)
    logged = {}
    for name in ("entropy", "kl"):
        total, count = torch.zeros((), dtype=dtype), 0
        for r in records:
            mask = r.completion_mask
            values = r.entropies if name == "entropy" else None
            if values is None:
                gap = (r.ref_logps - r.logps).to(dtype)
                values = torch.exp(gap) - gap - 1
            total = total + (values.to(dtype) * mask).sum()
            count += int(mask.sum())
        logged[name] = float(total / count)
    result = check_interval([records], logged, s, 0, 1)
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["entropy"].passed and verdicts["kl"].passed, [v.reason for v in result.verdicts]
    assert verdicts["entropy"].precision.dtype == held


def test_the_recorded_dtype_wins_over_the_runs():
    records = uneven("float32")
    terms = check_interval([records], {"entropy": 2.78}, settings("float64"), 0, 1).verdicts[0]
    assert terms.precision.dtype == "float32"  # held float32 in a float64 run
    unknown = [LossRecord(**{**r.__dict__, "held": None}) for r in records]  # float64 tensors, nothing recorded
    verdict = check_interval([unknown], {"entropy": 2.78}, settings("bfloat16"), 0, 1).verdicts[0]
    assert verdict.precision.dtype == "float64" and verdict.precision.source == "recorded dtype"


def test_bound_follows_the_arithmetic():
    """u per dtype; the bound grows with the terms' size, their number (log2) and the formula's operands, and
    never falls below float32 storage rounding."""
    assert UNIT_ROUNDOFF["float32"] == 2.0**-24 and unit_roundoff("torch.bfloat16") == 2.0**-8
    assert coarsest("float32", None, "bfloat16", "float16") == "bfloat16" and coarsest(None) is None
    p = Precision("float32", 100, 1.0)
    assert p.bound(1.0) == pytest.approx(2 * ((3 + 8) * 2.0**-24 * 1.0 + 2 * 2.0**-24))
    assert Precision("float32", 10_000, 1.0).bound(1.0) > p.bound(1.0)
    assert Precision("float32", 100, 2.0).bound(1.0) > p.bound(1.0)
    assert Precision("float32", 100, 1.0, computed=3.0).bound(1.0) > p.bound(1.0)
    assert Precision("float64", 100, 1.0).bound(1.0) >= 2 * 5 * 2.0**-24  # stored through float32
    bf16 = Precision("bfloat16", 100, 1.0)
    assert bf16.bound(1.0) == pytest.approx(2 * (3 * 2.0**-8 + 8 * 2.0**-24 + 2 * 2.0**-8))  # sums in float32
    assert Precision("float32", 100, 1.0, floor=0.25).bound(1.0) == pytest.approx(p.bound(1.0) + 0.25)


def fit_verdict(logged: float, expected: float, p: Precision) -> MetricVerdict:
    gap = abs(logged - expected)
    return MetricVerdict("entropy", MetricStatus.PASS, logged=logged, expected=expected, abs_err=gap,
                         tol=p.bound(expected), precision=p)  # fmt: skip


def test_a_pass_that_a_wrong_pooling_explains_fails_by_fit():
    """Inside the tolerance, but the contract's value is more than FIT_RATIO roundings away and the flat mean of
    micro-batch means within one: the verdict fails and names class 16; a candidate that fits no better leaves
    the pass alone."""
    p = Precision("float32", 1000, 2.7)
    expected = 2.7
    wrong = expected + 0.9 * p.bound(expected)
    assert abs(wrong - expected) > FIT_RATIO * p.resolution(expected)
    flat = Candidate((16,), "flat mean of per-micro-batch token means", wrong, "loss records")
    failed = better_fit(fit_verdict(wrong, expected, p), [flat])
    assert failed.status is MetricStatus.FAIL and failed.diagnosis.classes == (16,)
    assert failed.reason.startswith("fit: ")
    near = expected + 0.5 * p.resolution(expected)  # an honest rounding: the contract explains it
    assert better_fit(fit_verdict(near, expected, p), [Candidate((16,), "flat", near)]).passed
    halfway = expected + 0.45 * p.bound(expected)  # neither explains it within one rounding: the tolerance decides
    assert better_fit(fit_verdict(halfway, expected, p), [flat]).passed
    assert not fits_better(p, math.nan, expected, wrong)


def test_fit_reaches_the_live_check():
    """End to end: two micro-batches whose flat mean sits inside the derived tolerance but FIT_RATIO roundings
    from the token mean; the live check fails the interval by fit and names class 16."""
    s = settings("float32", beta=0.0)
    a = record([30], [2.7], [-2.0], [-2.0], "float32")
    b = record([70], [2.7], [-2.0], [-2.0], "float32")
    p = Precision("float32", 100, 2.7)
    step = float(torch.tensor(2.7, dtype=torch.float32)) * 12 * 2.0**-24 * 10  # flat - token = 0.2 (e_a - e_b)
    b = LossRecord(**{**b.__dict__, "entropies": (b.entropies - step).float().double()})
    records = [a, b]
    logged = flat_mean(records, "entropy")
    verdict = check_interval([records], {"entropy": logged}, s, 0, 1).verdicts[0]
    gap = abs(logged - verdict.expected)
    assert FIT_RATIO * p.resolution(verdict.expected) < gap < verdict.tol  # inside the tolerance
    assert verdict.status is MetricStatus.FAIL and verdict.diagnosis.classes == (16,), verdict
