"""The terminal shows a check's diagnosis on its one line, and a check's own words for what it compared."""

from __future__ import annotations

import dataclasses
import math

from harness.compare import compare
from harness.report import Report
from harness.report.format import COMPARED, diagnosis_line, failure_line, first_diagnosis
from harness.report.terminal import failure_lines, render_terminal
from harness.verdict import CheckId, CheckResult, CheckStatus, Diagnosis, MetricStatus


def report_of(*results):
    report = Report("reference-grpo", "cpu", algorithm="grpo", dtype="float32", torch="2.13.0", seed=0)
    for result in results:
        report.add(result)
    return report


def failing(name, logged, expected, where=None):
    (verdict,) = compare({name: logged}, {name: expected}, "float32", where=where)
    assert verdict.status is MetricStatus.FAIL
    return verdict


def test_compare_reasons_keep_the_form_the_failure_line_reads():
    for kind in ("oracle", "formula", "gradient", "identity", "network", "partition", "recompute"):
        (verdict,) = compare({"x": 2.0}, {"x": 1.0}, "float32", kind=kind)
        assert COMPARED.match(verdict.reason), verdict.reason


def test_a_check_that_says_what_it_compared_reads_so_and_the_others_as_before():
    plain = failing("kl", 2.0, 1.0, where="log 1")
    assert failure_line("uneven_lengths", plain).startswith("FAIL uneven_lengths kl @ log 1: logged=2 expected=1 gap=1")
    said = dataclasses.replace(
        plain, reason="dL/dlogp recorded at window 1, row 1, token 3 is 3 where the formula gives 0"
    )
    assert failure_line("logp_gradient", said) == (
        "FAIL logp_gradient kl @ log 1: dL/dlogp recorded at window 1, row 1, token 3 is 3 where the formula gives 0"
    )


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


def test_a_note_naming_a_class_is_shown_when_no_metric_has_a_diagnosis():
    note = "steps after micro-batches 4 and 8 (counted across the run): an accumulation counter running (class 15)"
    result = CheckResult(CheckId("every_microbatch_applied"), CheckStatus.FAIL, ("steps misplaced",),
                         ("12 tokens compared", note))  # fmt: skip
    line = render_terminal(report_of(result)).splitlines()[1]
    assert line.endswith(f"FAIL every_microbatch_applied: steps misplaced = {note}")
    assert failure_lines(report_of(result))[-1] == f"    = {note}"
    plain = CheckResult(CheckId("every_microbatch_applied"), CheckStatus.FAIL, ("steps misplaced",), ("12 tokens",))
    assert " = " not in render_terminal(report_of(plain)).splitlines()[1]
