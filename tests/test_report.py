"""Reports: strict JSON with nulls, the Markdown summary, the terminal table, one-line failures."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from harness.oracle import Expected, compare
from harness.report import (
    METRIC_KEYS,
    ReportCollector,
    failure_line,
    overall_status,
    render_markdown,
    render_terminal,
    to_json,
)


def strict_load(text: str):
    """json.loads that refuses NaN / Infinity, as strict JSON readers do."""

    def refuse(constant: str):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def uneven_results():
    expected = {
        "val/ratio": Expected("val/ratio", 1.0),
        "val/ratio_var": Expected("val/ratio_var", 0.0),
        "loss/policy_avg": Expected("loss/policy_avg", 0.25),
        "policy/entropy_avg": Expected("policy/entropy_avg", 2.0),
        "objective/scores": Expected("objective/scores", None, "no scores were supplied", required=False),
    }
    logged = {
        "val/ratio": 0.6667,
        "val/ratio_var": float("nan"),
        "loss/policy_avg": 0.25,
        "objective/scores": 1.0,
    }
    return compare(logged, expected, "float32")


def collector(status_of_second: str | None = None) -> ReportCollector:
    report = ReportCollector(target="reference", device="cpu", torch_version="2.13.0", seed=7, dtype="float32")
    report.add("uneven_split[epochs=1]", "uneven_split", uneven_results())
    report.add("lr0_ratio", "lr0_ratio", compare({"val/ratio": 1.0}, {"val/ratio": 1.0}, "float32"))
    return report


def test_json_schema_and_nulls(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    path = collector().write(tmp_path / "reports")
    assert path == tmp_path / "reports" / "verify.json"
    data = strict_load(path.read_text())
    assert set(data) == {"target", "device", "dtype", "torch", "status", "seed", "checks"}
    assert (data["target"], data["device"], data["torch"], data["seed"]) == ("reference", "cpu", "2.13.0", 7)
    assert data["status"] == "fail"
    first, second = data["checks"]
    assert set(first) == {"id", "scenario", "status", "message", "metrics"}
    assert (first["status"], second["status"]) == ("fail", "pass")
    for metric in first["metrics"]:
        assert tuple(metric) == (*METRIC_KEYS, "failed")
    by_name = {m["name"]: m for m in first["metrics"]}
    assert by_name["val/ratio_var"]["logged"] is None and by_name["val/ratio_var"]["status"] == "nan"
    assert by_name["policy/entropy_avg"]["logged"] is None and by_name["policy/entropy_avg"]["status"] == "missing"
    assert by_name["val/ratio"]["abs_err"] == pytest.approx(0.3333)
    assert "FAIL uneven_split val/ratio" in first["message"]
    assert (tmp_path / "reports" / "verify.md").read_text().startswith("## PPO statistics verify: FAIL")


def test_to_json_turns_nan_and_inf_into_null():
    data = strict_load(to_json({"a": float("nan"), "b": [float("inf"), 1.5, None], "c": (1, -float("inf"))}))
    assert data == {"a": None, "b": [None, 1.5, None], "c": [1, None]}


def test_failure_line_format():
    results = {r.name: r for r in uneven_results()}
    line = failure_line("uneven_split", results["val/ratio"])
    tol = results["val/ratio"].tol
    assert line == (f"FAIL uneven_split val/ratio: logged=0.6667 expected=1 gap=0.3333 (rel 0.3333, tol {tol:.6g})")
    missing = failure_line("uneven_split", results["policy/entropy_avg"])
    assert missing.startswith("FAIL uneven_split policy/entropy_avg: logged=missing expected=2 gap=n/a")
    assert missing.endswith("[missing: policy/entropy_avg is not in the logged metrics]")
    nan = failure_line("uneven_split", results["val/ratio_var"])
    assert "logged=nan" in nan and "[nan:" in nan


def test_markdown_tables():
    text = render_markdown(collector().as_dict())
    assert "| check | scenario | status | message |" in text
    assert "### Failing metrics" in text
    failing = text.split("### Failing metrics")[1].split("<details>")[0]
    rows = [line for line in failing.splitlines() if line.startswith("| uneven_split")]
    assert {row.split(" | ")[1] for row in rows} == {"val/ratio", "val/ratio_var", "policy/entropy_avg"}
    assert "| lr0_ratio | val/ratio | 1 | 1 | 0 |" in text  # passing metrics are in the folded table only


def test_markdown_escapes_pipes():
    report = ReportCollector("t|x", "cpu", torch_version="2", seed=0)
    report.add("c", "s", message="a | b", status="error")
    assert "a \\| b" in report.markdown()


def test_step_summary_is_appended(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = collector()
    report.write(tmp_path / "a")
    report.write(tmp_path / "b")
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert text.count("## PPO statistics verify: FAIL") == 2
    report.write(tmp_path / "c", step_summary=False)
    assert summary.read_text().count("## PPO statistics verify") == 2


def test_terminal_table_lists_every_metric_and_the_failures():
    lines = render_terminal(collector().as_dict()).splitlines()
    assert lines[0].startswith("PPO statistics verify: FAIL  target=reference device=cpu dtype=float32")
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
    assert len(failures) == 3  # val/ratio, val/ratio_var, policy/entropy_avg; optional scores left out


def test_overall_status():
    assert overall_status([]) == "error"  # nothing verified is never a pass
    assert overall_status(["skip"]) == "error"
    assert overall_status(["pass", "skip"]) == "pass"
    assert overall_status(["pass", "error"]) == "error"
    assert overall_status(["pass", "fail", "error"]) == "fail"


def test_empty_collector_and_config_errors():
    report = ReportCollector("reference", "cpu", torch_version="2.13.0", seed=0)
    assert report.status == "error"
    report.add("ok", "lr0_ratio", compare({"val/ratio": 1.0}, {"val/ratio": 1.0}, "float32"))
    assert report.status == "pass"
    report.config_errors.append("suite/test_verify.py::test_x: bad option")
    data = report.as_dict()
    assert data["status"] == "error" and data["checks"][-1]["status"] == "error"


def test_add_a_check_object_and_validate_status():
    report = ReportCollector("reference", "cpu", torch_version="2.13.0", seed=0)
    check = SimpleNamespace(id="freshness", scenario="freshness", status="fail", message="stale", metrics=[])
    added = report.add(check)
    assert (added.id, added.status, added.message) == ("freshness", "fail", "stale")
    with pytest.raises(ValueError, match="status"):
        report.add("x", "y", status="passed")


def test_missing_and_nan_metrics_fail_the_check():
    report = ReportCollector("reference", "cpu", torch_version="2.13.0", seed=0)
    (missing,) = compare({}, {"val/ratio": 1.0}, "float32")
    (nan,) = compare({"val/ratio": math.nan}, {"val/ratio": 1.0}, "float32")
    assert report.add("a", "s", [missing]).status == "fail"
    assert report.add("b", "s", [nan]).status == "fail"
    opted_out = {"objective/scores": Expected("objective/scores", None, "none", required=False)}
    optional = compare({"objective/scores": 1.0}, opted_out, "float32")
    assert report.add("c", "s", optional).status == "pass"
