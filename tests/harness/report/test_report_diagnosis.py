"""The terminal shows a check's diagnosis on its one line, and a check's own words for what it compared; every surface
writes a check's failure lines through one function."""

from __future__ import annotations

import dataclasses
import math

from harness.algorithms.grpo.tolerances import TOLERANCES
from harness.baseline import Baseline, Entry
from harness.compare import compare
from harness.report import Report
from harness.report.format import check_failure_lines, diagnosis_line, failure_line, first_diagnosis
from harness.report.terminal import failure_lines, render_terminal
from harness.verdict import Check, CheckId, CheckResult, CheckStatus, Diagnosis, MetricStatus, Wording


def report_of(*results):
    report = Report("reference-grpo", "cpu", algorithm="grpo", dtype="float32", torch="2.13.0", seed=0)
    for result in results:
        report.add(result)
    return report


def failing(name, logged, expected, where=None):
    (verdict,) = compare({name: logged}, {name: expected}, "float32", TOLERANCES, where=where)
    assert verdict.status is MetricStatus.FAIL
    return verdict


def test_compare_says_its_reasons_are_its_own_words():
    for kind in ("oracle", "formula", "gradient", "identity", "network", "partition", "recompute"):
        (verdict,) = compare({"x": 2.0}, {"x": 1.0}, "float32", TOLERANCES, kind=kind)
        assert verdict.wording is Wording.COMPARE and verdict.reason.startswith(f"{kind}: gap ")


def test_a_check_that_says_what_it_compared_reads_so_and_the_others_as_before():
    plain = failing("kl", 2.0, 1.0, where="log 1")
    assert failure_line("uneven_lengths", plain).startswith("FAIL uneven_lengths kl @ log 1: logged=2 expected=1 gap=1")
    words = "dL/dlogp recorded at window 1, row 1, token 3 is 3 where the formula gives 0"
    said = dataclasses.replace(plain, reason=words, wording=Wording.CHECK)
    assert failure_line("logp_gradient", said) == f"FAIL logp_gradient kl @ log 1: {words}"
    # whose words they are is the verdict's field, never read from the text: words that look like compare's stay
    # the check's, and compare's words in another form stay compare's (the numbers are printed)
    alike = dataclasses.replace(said, reason="window 1: gap 3 exceeds tolerance 1e-06")
    assert (
        failure_line("logp_gradient", alike) == "FAIL logp_gradient kl @ log 1: window 1: gap 3 exceeds tolerance 1e-06"
    )
    reworded = dataclasses.replace(plain, reason="the oracle's value is 1, the logged one 2")
    assert failure_line("uneven_lengths", reworded) == failure_line("uneven_lengths", plain)


def test_a_fail_by_fit_gives_the_numbers_then_its_reason():
    plain = failing("kl", 2.0, 1.0)
    fit = dataclasses.replace(plain, reason="within tolerance 3, but a known wrong formula fits", wording=Wording.FIT)
    assert failure_line("s", fit) == failure_line("s", plain) + " [within tolerance 3, but a known wrong formula fits]"


def test_a_diagnosis_without_a_value_reads_as_its_formula():
    assert diagnosis_line(Diagnosis((41,), "the KL subtracted", math.nan, math.nan)) == "= the KL subtracted (class 41)"
    assert diagnosis_line(Diagnosis((), "a common factor", math.nan, math.nan)) == "= a common factor"
    assert (
        diagnosis_line(Diagnosis((48,), "population std", 0.5, 1e-9)) == "= population std (class 48): 0.5, gap 1e-09"
    )


def test_the_line_shows_the_first_failing_metric_and_the_checks_diagnosis():
    first, second = failing("entropy", 2.0, 1.0), failing("kl", 3.0, 1.0)
    second = dataclasses.replace(second, diagnosis=Diagnosis((21,), "k3 the wrong way round", 3.0, 0.0))
    result = CheckResult(CheckId("uneven_lengths"), CheckStatus.FAIL, ("2 metric(s) disagree",), (), (first, second))
    assert first_diagnosis(result) == "; kl = k3 the wrong way round (class 21): 3, gap 0"
    (line,) = render_terminal(report_of(result)).splitlines()[1:]
    assert line.endswith(
        failure_line("uneven_lengths", first) + "; kl = k3 the wrong way round (class 21): 3, gap 0 (+1 more)"
    )
    own = dataclasses.replace(result, metrics=(second, first))
    assert (
        render_terminal(report_of(own))
        .splitlines()[1]
        .endswith(failure_line("uneven_lengths", second) + " = k3 the wrong way round (class 21): 3, gap 0 (+1 more)")
    )
    undiagnosed = CheckResult(CheckId("uneven_lengths"), CheckStatus.FAIL, ("1 metric(s) disagree",), (), (first,))
    assert " = " not in render_terminal(report_of(undiagnosed)).splitlines()[1]


COUNTER = Diagnosis((15,), "steps after micro-batches 4 and 8 (counted across the run): an accumulation counter",
                    math.nan, math.nan)  # fmt: skip


def test_a_checks_own_diagnosis_is_data_shown_on_its_line_and_under_its_failure():
    check = Check(CheckId("every_microbatch_applied"))
    check.fail("steps misplaced")
    check.note("12 tokens compared")
    check.diagnose(COUNTER)
    result = check.finish()
    assert result.diagnoses == (COUNTER,)
    assert result.message == f"steps misplaced; 12 tokens compared; {COUNTER.formula} (class 15)"
    assert result.as_dict()["diagnoses"] == [COUNTER.as_dict()] and COUNTER.as_dict()["classes"] == [15]
    line = render_terminal(report_of(result)).splitlines()[1]
    assert line.endswith(f"FAIL every_microbatch_applied: steps misplaced = {COUNTER.formula} (class 15)")
    assert check_failure_lines(result)[-1] == f"    = {COUNTER.formula} (class 15)"
    # a note that ends like a diagnosis is a note: only the check's diagnoses are shown as one
    noted = CheckResult(CheckId("every_microbatch_applied"), CheckStatus.FAIL, ("steps misplaced",),
                        (f"{COUNTER.formula} (class 15)",))  # fmt: skip
    assert " = " not in render_terminal(report_of(noted)).splitlines()[1]
    assert not any(line.startswith("    = ") for line in check_failure_lines(noted))


def test_every_surface_writes_a_checks_failure_lines_through_one_function():
    first, second = failing("entropy", 2.0, 1.0), failing("kl", 3.0, 1.0)
    second = dataclasses.replace(second, diagnosis=Diagnosis((21,), "k3 the wrong way round", 3.0, 0.0))
    check = Check(CheckId("uneven_lengths", (("loss_type", "dapo"),)))
    check.absorb([first, second])
    check.diagnose(COUNTER)
    result = dataclasses.replace(check.finish(), contract_changes=("contract change: GRPO contract 2 ...",))
    lines = check_failure_lines(result)  # pytest's failure message (harness/suite/test_verify.py)
    assert lines == [
        f"FAIL uneven_lengths uneven_lengths[loss_type=dapo]: {result.message}",
        failure_line("uneven_lengths", first),
        failure_line("uneven_lengths", second),
        "    = k3 the wrong way round (class 21): 3, gap 0",
        f"    = {COUNTER.formula} (class 15)",
        "contract change: GRPO contract 2 ...",
    ]
    verbose = render_terminal(report_of(result), verbose=True).splitlines()
    assert failure_lines(report_of(result)) == lines == verbose[-len(lines) :]
    # with a baseline: the same lines, a known failure's marked `known`, a stale entry's one line
    known = report_of(result)
    known.baseline = Baseline("known.toml", (Entry(str(result.id), "a mean of means"),))
    assert failure_lines(known) == [line if line.startswith(" ") or line.startswith("contract") else f"known {line}"
                                    for line in lines]  # fmt: skip
    passed = CheckResult(result.id, CheckStatus.PASS)
    stale = report_of(passed)
    stale.baseline = known.baseline
    assert failure_lines(stale) == [
        "STALE uneven_lengths uneven_lengths[loss_type=dapo]: passes: remove it from the baseline known.toml once you "
        "know why: a fix, or a change in how the trainer runs the scenario (baseline: a mean of means)"
    ]
    assert check_failure_lines(passed) == []
