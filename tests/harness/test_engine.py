"""The engine without pytest (harness/engine.py): `run_gate -> Report`, its exit codes, `-k` selection
(harness/select.py) and verify.xml (harness/report/junit.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from harness.baseline import Baseline, Entry
from harness.engine import Gate, GateOptions, error_lines, exit_code, run_gate
from harness.errors import HarnessConfigError
from harness.report import Report
from harness.report.junit import junit_tree
from harness.select import keyword_matcher
from harness.verdict import CheckId, CheckResult, CheckStatus, MetricStatus, MetricVerdict
from tests.support.gates import declaring, observations

IDS = ["uneven_split[epochs=1]", "uneven_split[epochs=2]", "extremes", "freshness", "Short_Window"]


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        ("uneven", IDS[:2]),
        ("uneven and not epochs=2", IDS[:1]),
        ("extremes or freshness", IDS[2:4]),
        ("not (uneven or extremes)", IDS[3:]),
        ("short_WINDOW", IDS[4:]),
        ("(uneven and epochs=2) or fresh", [IDS[1], IDS[3]]),
    ],
)
def test_k_selects_check_ids_as_pytest_does(expression, selected):
    selects = keyword_matcher(expression)
    assert [i for i in IDS if selects(i)] == selected


@pytest.mark.parametrize(("expression", "said"), [("", "empty"), ("(uneven", "ends too early"),
                                                  ("uneven and", "ends too early"), ("uneven )", "unexpected ')'"),
                                                  ("or uneven", "unexpected 'or'")])  # fmt: skip
def test_an_expression_that_cannot_be_read_is_one_configuration_error(expression, said):
    with pytest.raises(HarnessConfigError, match=re.escape(said)):
        keyword_matcher(expression)


def result(name: str, status: str, *metrics: MetricVerdict) -> CheckResult:
    broke = ("it broke",) if status != "pass" and not metrics else ()
    return CheckResult(CheckId(name), status, problems=broke, metrics=metrics)


def report_of(*checks: CheckResult, baseline: Baseline | None = None) -> Report:
    return Report(target="t", device="cpu", seed=0, dtype="float32", algorithm="grpo", torch="x", checks=list(checks),
                  baseline=baseline)  # fmt: skip


def test_the_exit_code_is_the_reports_with_the_baseline_applied():
    known = Baseline("b.toml", (Entry("a", "known a"),))
    assert exit_code(report_of(result("a", "pass"))) == 0
    assert exit_code(report_of(result("a", "fail"))) == 1
    assert exit_code(report_of(result("a", "error"), result("b", "pass"))) == 1  # the trainer raised: a failure
    assert exit_code(report_of(result("a", "fail"), result("b", "pass"), baseline=known)) == 0
    assert exit_code(report_of(result("a", "pass"), baseline=known)) == 1  # a stale entry
    unconfigured = report_of(result("a", "error"), result("b", "pass"))
    unconfigured.unconfigured["a"] = "learning_rate must be >= 0"
    assert exit_code(unconfigured) == 2
    assert error_lines(unconfigured)[0].startswith("1 check could not be configured: a")
    errors = report_of(result("a", "pass"))
    errors.config_errors.append("bad")
    assert exit_code(errors) == 2


def test_junit_says_each_outcome_as_ci_systems_read_it():
    failing = MetricVerdict("entropy", MetricStatus.FAIL, logged=2.0, expected=1.0, abs_err=1.0, tol=0.1)
    report = report_of(result("a", "fail", failing), result("b", "fail"), result("c", "pass"),
                       CheckResult(CheckId("d"), "not_applicable", notes=("no vespo",)), result("e", "pass"),
                       baseline=Baseline("b.toml", (Entry("b", "known b"), Entry("e", "fixed?"))))  # fmt: skip
    report.config_errors.append("something was wrong")
    suite = junit_tree(report, {"a": 1.5}).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert [c.tag for c in cases["test_check[a]"]] == ["failure"] and cases["test_check[a]"].get("time") == "1.500"
    assert cases["test_check[a]"].find("failure").get("message").startswith("FAIL a entropy: logged=2")
    assert cases["test_check[b]"].find("skipped").get("type") == "pytest.xfail"
    assert "known b" in cases["test_check[b]"].find("skipped").get("message")
    assert list(cases["test_check[c]"]) == []
    assert cases["test_check[d]"].find("skipped").get("message") == "not applicable: no vespo"
    assert "remove it from the baseline" in cases["test_check[e]"].find("failure").get("message")
    assert cases["configuration[error=0]"].find("error").get("message") == "configuration error: something was wrong"
    counts = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": "6", "failures": "2", "errors": "1", "skipped": "2"}
    ET.tostring(suite)  # serialisable


def test_junit_says_first_what_changed_in_a_check_the_baseline_knows_otherwise():
    from harness.baseline_pins import Pins

    failing = MetricVerdict("entropy", MetricStatus.FAIL, logged=2.0, expected=1.0, abs_err=1.0, tol=0.1)
    pinned = Entry("a", "entropy is class 16", pins=Pins(metrics=(("entropy", frozenset({"16"})),)))
    report = report_of(result("a", "fail", failing), baseline=Baseline("b.toml", (pinned,)))
    assert not report.known(report.checks[0])
    failure = junit_tree(report).getroot().find("testsuite").find("testcase").find("failure")
    assert failure.get("message").startswith("not as the baseline knows it: entropy"), failure.get("message")
    assert "FAIL a entropy: logged=2" in failure.text


def test_run_gate_runs_the_selected_checks_into_one_report_in_this_process():
    from harness.targets import resolve

    target = resolve("reference-grpo")
    cache = declaring(observations(target.factory), target)
    seen = []
    options = GateOptions(target="reference-grpo", keyword="extremes and not (sequence_level or clip_asymmetric)")
    report = run_gate(options, cache=cache, on_result=seen.append)
    ran = [str(c.id) for c in report.checks]
    assert ran == ["extremes", "logp_gradient[run=extremes]"] == [str(r.id) for r in seen]
    assert report.status is CheckStatus.PASS and exit_code(report) == 0


def test_a_selection_of_nothing_and_a_bad_option_are_configuration_errors_before_any_check():
    with pytest.raises(HarnessConfigError, match="selects none of the grpo checks"):
        Gate(GateOptions(target="reference-grpo", keyword="no_such_check"))
    with pytest.raises(HarnessConfigError, match="unknown check id"):
        Gate(GateOptions(target="reference-grpo", checks=("no_such_check",)))


def test_a_check_whose_run_cannot_be_configured_errs_alone_and_the_run_exits_2():
    gate = Gate(GateOptions(target="tests.support.no_vespo:refusing", keyword="uneven_lengths and (vespo or dapo)"))
    for case in gate.cases():
        gate.run(case)
    report = gate.finish()
    statuses = {str(c.id): c.status.value for c in report.checks}
    assert statuses == {"uneven_lengths[loss_type=dapo]": "pass", "uneven_lengths[loss_type=vespo]": "error"}
    assert list(report.unconfigured) == ["uneven_lengths[loss_type=vespo]"] and exit_code(report) == 2


def test_a_run_in_which_nothing_was_verified_says_so():
    gate = Gate(GateOptions(target="tests.support.no_vespo:declaring", keyword="uneven_lengths and vespo"))
    for case in gate.cases():
        gate.run(case)
    report = gate.finish()
    assert [c.status.value for c in report.checks] == ["not_applicable"]
    assert report.config_errors[0].startswith("nothing was verified") and exit_code(report) == 2


@pytest.mark.parametrize("target", ["reference", "reference-grpo"])
def test_sizes_that_do_not_divide_are_refused_before_any_model_work(target):
    """Not a check of the trainer: the harness itself rejects impossible geometry (each algorithm's
    `impossible_spec`) before it builds anything."""
    from harness.instrument.observe import observe

    gate = Gate(GateOptions(target=target))
    with pytest.raises(HarnessConfigError, match="not divisible"):
        observe(gate.target.factory, gate.algorithm.impossible_spec(gate.run_spec))
