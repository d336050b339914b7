"""Reports: strict JSON with nulls, the Markdown summary, the terminal table, one-line failures."""

from __future__ import annotations

import json
import math

import pytest

from harness.algorithms.ppo.tolerances import TOLERANCES
from harness.compare import compare
from harness.oracle.pooling import Expectation
from harness.report import JSON_NAME, MARKDOWN_NAME, Report, write_report
from harness.report.format import check_failure_lines, failure_line
from harness.report.markdown import render_markdown
from harness.report.terminal import failure_lines, render_terminal
from harness.verdict import (
    Check,
    CheckId,
    CheckResult,
    CheckStatus,
    MetricStatus,
    MetricVerdict,
)

METRIC_KEYS = (
    "name", "where", "logged", "expected", "abs_err", "rel_err", "tol", "scale", "status", "reason", "failed",
    "diagnosis", "diagnosis_reason", "tol_source", "precision",
)  # fmt: skip
"""The keys of one metric in verify.json, in order."""


def strict_load(text: str):
    """json.loads that refuses NaN / Infinity, as strict JSON readers do."""

    def refuse(constant: str):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def uneven_results() -> list[MetricVerdict]:
    expected = {
        "val/ratio": Expectation("val/ratio", 1.0),
        "val/ratio_var": Expectation("val/ratio_var", 0.0),
        "loss/policy_avg": Expectation("loss/policy_avg", 0.25),
        "policy/entropy_avg": Expectation("policy/entropy_avg", 2.0),
        "objective/scores": Expectation.unknown("objective/scores", "no scores were supplied", required=False),
    }
    logged = {
        "val/ratio": 0.6667,
        "val/ratio_var": float("nan"),
        "loss/policy_avg": 0.25,
        "objective/scores": 1.0,
    }
    return compare(logged, expected, "float32", TOLERANCES)


def checked(scenario: str, verdicts, **params) -> CheckResult:
    """A finished check of `scenario` that absorbed `verdicts`, as a scenario makes it."""
    check = Check(CheckId(scenario, tuple(params.items())))
    check.absorb(verdicts)
    return check.finish()


def collector() -> Report:
    report = Report(target="reference", device="cpu", torch="2.13.0", seed=7, dtype="float32", algorithm="ppo")
    report.add(checked("uneven_split", uneven_results(), epochs=1))
    report.add(checked("lr0_ratio", compare({"val/ratio": 1.0}, {"val/ratio": 1.0}, "float32", TOLERANCES)))
    return report


def test_json_schema_and_nulls(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    report = collector()
    path = write_report(report, tmp_path / "reports")
    assert path == tmp_path / "reports" / "verify.json" and path.name == JSON_NAME
    data = strict_load(path.read_text())
    assert set(data) == {"target", "algorithm", "device", "dtype", "torch", "status", "seed", "checks"}
    assert (data["target"], data["device"], data["torch"], data["seed"]) == ("reference", "cpu", "2.13.0", 7)
    assert (data["algorithm"], data["dtype"]) == ("ppo", "float32")
    assert data["status"] == "fail"
    first, second = data["checks"]
    assert set(first) == {"id", "scenario", "status", "message", "metrics", "diagnoses", "contract_changes"}
    assert first["diagnoses"] == []
    assert (first["id"], first["scenario"], second["id"]) == ("uneven_split[epochs=1]", "uneven_split", "lr0_ratio")
    assert (first["status"], second["status"]) == ("fail", "pass")
    for metric in first["metrics"]:
        assert tuple(metric) == METRIC_KEYS
        assert metric["where"] is None
        # verify.json reads back into the same verdicts (the mutant runner relies on it)
        assert MetricVerdict.from_dict(metric).as_dict() == metric
    by_name = {m["name"]: m for m in first["metrics"]}
    assert by_name["val/ratio_var"]["logged"] is None and by_name["val/ratio_var"]["status"] == "nan"
    assert by_name["policy/entropy_avg"]["logged"] is None and by_name["policy/entropy_avg"]["status"] == "missing"
    assert by_name["val/ratio"]["abs_err"] == pytest.approx(0.3333)
    assert by_name["objective/scores"]["failed"] is False and by_name["val/ratio_var"]["failed"] is True
    # The message is the check's problems and notes; the pasteable FAIL lines are `check_failure_lines`.
    assert first["message"] == (
        "3 metric(s) disagree: val/ratio, val/ratio_var, policy/entropy_avg; "
        "objective/scores not recomputable: no scores were supplied"
    )
    uneven = report.checks[0]
    assert any(line.startswith("FAIL uneven_split val/ratio:") for line in check_failure_lines(uneven))
    assert (tmp_path / "reports" / MARKDOWN_NAME).read_text().startswith("## PPO statistics verify: FAIL")


def test_to_json_turns_nan_and_inf_into_null():
    odd = MetricVerdict(
        "val/ratio", MetricStatus.NAN, logged=float("nan"), expected=float("inf"),
        abs_err=-float("inf"), rel_err=float("nan"), tol=float("inf"), where="bs=2",
    )  # fmt: skip
    assert odd.as_dict() == {
        "name": "val/ratio",
        "where": "bs=2",
        "logged": None,
        "expected": None,
        "abs_err": None,
        "rel_err": None,
        "tol": None,
        "scale": None,
        "status": "nan",
        "reason": "",
        "failed": True,
        "diagnosis": None,
        "diagnosis_reason": "",
        "tol_source": "",
        "precision": None,
    }
    report = Report("reference", "cpu", torch="2", seed=0)
    report.add(CheckResult(CheckId("s"), CheckStatus.FAIL, problems=("odd",), metrics=(odd, odd)))
    data = strict_load(report.to_json())
    assert data["checks"][0]["metrics"] == [odd.as_dict(), odd.as_dict()]  # tuples became lists
    assert data["dtype"] is None and data["algorithm"] is None


def test_failure_line_format():
    results = {r.name: r for r in uneven_results()}
    line = failure_line("uneven_split", results["val/ratio"])
    tol = results["val/ratio"].tol
    source = "from the float32 row of val/ratio"  # a plain number expected: the table's row (docs/tolerances.md)
    assert line == (f"FAIL uneven_split val/ratio: logged=0.6667 expected=1 gap=0.3333 (rel 0.3333, tol {tol:.6g} "
                    f"{source})")  # fmt: skip
    missing = failure_line("uneven_split", results["policy/entropy_avg"])
    assert missing.startswith("FAIL uneven_split policy/entropy_avg: logged=missing expected=2 gap=n/a")
    assert missing.endswith("[missing: policy/entropy_avg is not in the logged metrics]")
    nan = failure_line("uneven_split", results["val/ratio_var"])
    assert "logged=nan" in nan and "[nan:" in nan
    (where,) = compare({"val/ratio": 0.6667}, {"val/ratio": 1.0}, "float32", TOLERANCES, where="bs=2")
    assert failure_line("uneven_split", where) == line.replace("val/ratio:", "val/ratio @ bs=2:")


def test_markdown_tables():
    text = render_markdown(collector())
    assert "| check | scenario | status | message |" in text
    assert "| uneven_split[epochs=1] | uneven_split | fail |" in text
    assert "### Failing metrics" in text
    failing = text.split("### Failing metrics")[1].split("<details>")[0]
    rows = [line for line in failing.splitlines() if line.startswith("| uneven_split")]
    assert {row.split(" | ")[1] for row in rows} == {"val/ratio", "val/ratio_var", "policy/entropy_avg"}
    assert "| lr0_ratio | val/ratio | 1 | 1 | 0 |" in text  # passing metrics are in the folded table only
    assert "algorithm `ppo`" in text.splitlines()[2]


def test_markdown_and_terminal_label_metrics_with_where():
    report = Report("reference", "cpu", torch="2", seed=0)
    verdicts = compare({"val/ratio": 0.5}, {"val/ratio": 1.0}, "float32", TOLERANCES, where="bs=2")
    report.add(checked("partition", verdicts))
    failing = render_markdown(report).split("### Failing metrics")[1].split("<details>")[0]
    assert "| partition | val/ratio @ bs=2 | 0.5 | 1 |" in failing
    assert strict_load(report.to_json())["checks"][0]["metrics"][0]["where"] == "bs=2"
    assert failure_lines(report) == [
        "FAIL partition partition: 1 metric(s) disagree: val/ratio @ bs=2",
        failure_line("partition", report.checks[0].metrics[0]),
    ]
    assert failure_lines(report)[1].startswith("FAIL partition val/ratio @ bs=2: logged=0.5 expected=1")


def test_markdown_escapes_pipes():
    report = Report("t|x", "cpu", torch="2", seed=0)
    report.add(CheckResult(CheckId("s", (("case", "c"),)), CheckStatus.ERROR, problems=("a | b",)))
    assert "a \\| b" in render_markdown(report)


def test_step_summary_is_appended(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = collector()
    write_report(report, tmp_path / "a")
    write_report(report, tmp_path / "b")
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert text.count("## PPO statistics verify: FAIL") == 2
    write_report(report, tmp_path / "c", step_summary=False)
    assert summary.read_text().count("## PPO statistics verify") == 2


def test_terminal_verdict_is_one_line_per_check():
    report = collector()
    report.add(CheckResult(CheckId("freshness"), CheckStatus.FAIL, problems=("update 2 reused update 1", "stale")))
    lines = render_terminal(report).splitlines()
    assert lines[0].startswith("PPO statistics verify: FAIL  target=reference algorithm=ppo device=cpu dtype=float32")
    assert len(lines) == 1 + 3
    uneven, lr0, fresh = lines[1:]
    # a failed check: its status, its id, and its first failing metric's pasteable line
    assert uneven.startswith("FAIL  uneven_split[epochs=1]  ")
    assert uneven.endswith(failure_line("uneven_split", report.checks[0].metrics[0]) + " (+2 more)")
    assert lr0 == "pass  lr0_ratio"
    # no failing metric: the first problem instead
    assert fresh == "FAIL  freshness               FAIL freshness: update 2 reused update 1 (+1 more)"


def test_terminal_table_lists_every_metric_and_the_failures():
    report = collector()
    lines = render_terminal(report, verbose=True).splitlines()
    # the header line now names the algorithm too
    assert lines[0].startswith("PPO statistics verify: FAIL  target=reference algorithm=ppo device=cpu dtype=float32")
    header = lines[1].split()
    assert header[:4] == ["check", "metric", "logged", "expected"]
    table = lines[2:8]
    assert [row.split()[1] for row in table] == [
        "val/ratio",
        "val/ratio_var",
        "loss/policy_avg",
        "policy/entropy_avg",
        "objective/scores",
        "val/ratio",
    ]
    column = lines[1].index("metric")
    assert all(row[column - 2 : column] == "  " and row[column] != " " for row in table)  # aligned
    failures = [line for line in lines if line.startswith("FAIL ")]
    # the check's problems and notes, then val/ratio, val/ratio_var, policy/entropy_avg; optional scores left out
    assert len(failures) == 4 and failures[0] == f"FAIL uneven_split uneven_split[epochs=1]: {report.checks[0].message}"
    assert failures == failure_lines(report) == lines[8:]


def test_overall_status():
    overall = CheckStatus.overall
    assert overall([]) == "error"  # nothing verified is never a pass
    assert overall(["skip"]) == "error"
    assert overall(["pass", "skip"]) == "pass"
    assert overall(["pass", "error"]) == "error"
    assert overall(["pass", "fail", "error"]) == "fail"
    assert overall([CheckStatus.PASS, "fail"]) is CheckStatus.FAIL
    with pytest.raises(ValueError, match="passed"):
        overall(["passed"])


def test_empty_collector_and_config_errors():
    report = Report("reference", "cpu", torch="2.13.0", seed=0)
    assert report.status == "error" and report.status is CheckStatus.ERROR
    report.add(checked("lr0_ratio", compare({"val/ratio": 1.0}, {"val/ratio": 1.0}, "float32", TOLERANCES)))
    assert report.status == "pass"
    report.config_errors.append("suite/test_verify.py::test_x: bad option")
    data = report.as_dict()
    assert data["status"] == "error" and data["checks"][-1]["status"] == "error"
    error = data["checks"][-1]
    assert (error["id"], error["scenario"]) == ("configuration[error=0]", "configuration")
    assert error["message"] == "suite/test_verify.py::test_x: bad option" and error["metrics"] == []
    assert failure_lines(report) == [
        "ERROR configuration configuration[error=0]: suite/test_verify.py::test_x: bad option"
    ]


def test_add_a_check_object_and_validate_status():
    report = Report("reference", "cpu", torch="2.13.0", seed=0)
    check = Check(CheckId("freshness"))
    check.fail("stale")
    result = check.finish()
    added = report.add(result)
    assert added is result and report.checks == [result]
    assert (str(added.id), added.status, added.message) == ("freshness", "fail", "stale")
    assert report.as_dict()["checks"] == [
        {
            "id": "freshness",
            "scenario": "freshness",
            "status": "fail",
            "message": "stale",
            "metrics": [],
            "diagnoses": [],
            "contract_changes": [],
        }
    ]
    # a status is a CheckStatus now: an unknown one cannot be made, a known string becomes the enum
    with pytest.raises(ValueError, match="passed"):
        CheckStatus("passed")
    with pytest.raises(ValueError, match="passed"):
        CheckResult(CheckId("x"), "passed")
    assert CheckResult(CheckId("x"), "pass").passed and report.add(CheckResult(CheckId("x"), "pass")).passed


def test_missing_and_nan_metrics_fail_the_check():
    report = Report("reference", "cpu", torch="2.13.0", seed=0)
    (missing,) = compare({}, {"val/ratio": 1.0}, "float32", TOLERANCES)
    (nan,) = compare({"val/ratio": math.nan}, {"val/ratio": 1.0}, "float32", TOLERANCES)
    assert (missing.status, nan.status) == ("missing", "nan") and missing.failed and nan.failed
    assert report.add(checked("s", [missing], case="a")).status == "fail"
    assert report.add(checked("s", [nan], case="b")).status == "fail"
    opted_out = {"objective/scores": Expectation.unknown("objective/scores", "none", required=False)}
    optional = compare({"objective/scores": 1.0}, opted_out, "float32", TOLERANCES)
    passed = report.add(checked("s", optional, case="c"))
    assert passed.status == "pass" and passed.notes == ("objective/scores not recomputable: none",)
    assert report.status == "fail"
