"""Known failures (harness/baseline.py): the file, what it makes of a run, and the gate run with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.baseline import Baseline, Entry, load, outcome
from harness.baseline_pins import Pins
from harness.cli import main, without_options
from harness.errors import HarnessConfigError
from harness.report import Report
from harness.report.baseline_file import failed_entries, write
from harness.report.markdown import render_markdown
from harness.report.terminal import render_terminal
from harness.verdict import CheckId, CheckResult, CheckStatus
from tests.support.gate_run import ROOT, verify


def entropy_off(spec):
    """The reference GRPO trainer logging every `entropy` 0.5 too high: each check that reads it fails."""
    from harness.algorithms.grpo.targets.reference import factory

    run = factory(spec)
    train = run.train

    def shifted():
        return [{**log, "entropy": log["entropy"] + 0.5} if "entropy" in log else log for log in train()]

    run.train = shifted
    return run


entropy_off.algorithm = "grpo"
BROKEN = "tests.harness.test_baseline:entropy_off"


def baseline_file(tmp_path: Path, text: str, name: str = "baseline.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def entry(check: str, reason: str = "known to fail", link: str | None = None) -> str:
    return f'[[known]]\ncheck = "{check}"\nreason = "{reason}"\n' + (f'link = "{link}"\n' if link else "")


# ---------------------------------------------------------------- the file


def test_a_baseline_reads_in_file_order_with_an_optional_link(tmp_path):
    text = (
        "# known\n" + entry("extremes", "high_max is a mean of maxima", "https://example.org/1") + entry("short_window")
    )
    got = load(baseline_file(tmp_path, text), "grpo")
    assert got.entries == (
        Entry("extremes", "high_max is a mean of maxima", "https://example.org/1"),
        Entry("short_window", "known to fail"),
    )
    assert got.entry("short_window").link is None and got.entry("partition") is None
    assert load(baseline_file(tmp_path, "# nothing known\n"), "grpo").entries == ()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (entry("extremes") + 'reson = "x"\n', 'entry 1 (check = "extremes"): unknown key(s) reson; an entry has'),
        ('[[known]]\nreason = "x"\n', "entry 1: missing `check`"),
        (entry("extremes") + '[[known]]\ncheck = "partition"\n', 'entry 2 (check = "partition"): missing `reason`'),
        (entry("extremes") + entry("extremes"), 'entry 2 (check = "extremes"): check "extremes" is already entry 1'),
        (entry("extreme"), 'grpo has no check "extreme" (did you mean "extremes"?); `python -m harness checks'),
        (entry("lr0_ratio[epochs=1]"), 'grpo has no check "lr0_ratio[epochs=1]"'),
        ('[[known]]\ncheck = "extremes"\nreason = 3\n', 'entry 1 (check = "extremes"): `reason` must be a non-empty'),
        ('[[known]]\ncheck = "extremes"\nreason = " "\n', "`reason` must be a non-empty string"),
        ('[known]\ncheck = "extremes"\nreason = "x"\n', "`known` must be an array of tables"),
        ("version = 1\n" + entry("extremes"), "unknown top-level key(s) version"),
        ('[[known]\ncheck = "extremes"\n', "not TOML: "),
    ],
)
def test_a_bad_baseline_is_one_line_naming_the_file_and_the_entry(tmp_path, text, said):
    path = baseline_file(tmp_path, text)
    with pytest.raises(HarnessConfigError) as raised:
        load(path, "grpo", "reference-grpo")
    message = str(raised.value)
    assert message.startswith(f"baseline {path}: ") and said in message and "\n" not in message


def test_a_missing_baseline_file_is_one_line(tmp_path):
    with pytest.raises(HarnessConfigError, match=r"^baseline .*missing\.toml: cannot read it \(No such file"):
        load(tmp_path / "missing.toml", "grpo")


def test_a_bad_baseline_exits_2_in_one_line_before_any_check_runs(tmp_path):
    path = baseline_file(tmp_path, entry("extremes") + entry("extremes"))
    code, report, output = verify(tmp_path / "out", "--target", "reference-grpo", "--check", "short_window",
                                  "--baseline", str(path))  # fmt: skip
    assert code == 2 and output.strip().splitlines() == [
        f'error: baseline {path}: entry 2 (check = "extremes"): check "extremes" is already entry 1'
    ]
    assert report["checks"][0]["id"] == "configuration[error=0]" and len(report["checks"]) == 1


def test_a_bad_baseline_is_a_usage_error_of_pytest_itself(tmp_path):
    path = baseline_file(tmp_path, entry("extreme"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs", "harness.suite",
         "--ppo-target=reference-grpo", f"--ppo-baseline={path}", "-q"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "GITHUB_STEP_SUMMARY": ""},
    )  # fmt: skip
    assert proc.returncode == 4 and 'grpo has no check "extreme"' in proc.stderr, proc.stdout + proc.stderr


def test_seeds_forward_the_baseline_and_refuse_to_write_one(capsys):
    argv = ["verify", "--seeds", "0,1", "--baseline", "b.toml", "--check", "extremes"]
    assert "--baseline" in without_options(argv, ("--seeds", "--seed", "--report-dir"))
    assert main(["verify", "--seeds", "0,1", "--write-baseline", "b.toml"]) == 2
    assert "without --seeds" in capsys.readouterr().err


# ---------------------------------------------------------------- applied to a report


def result(check_id: str, status: CheckStatus) -> CheckResult:
    problems = ("1 metric(s) disagree: entropy",) if status is CheckStatus.FAIL else ()
    return CheckResult(CheckId(check_id), status, problems=problems)


def held_to(entries: list[Entry], *results: CheckResult) -> Report:
    report = Report(target="reference-grpo", device="cpu", seed=0, dtype="float32", algorithm="grpo",
                    torch="2.13.0", baseline=Baseline("known.toml", tuple(entries)))  # fmt: skip
    for r in results:
        report.add(r)
    return report


def test_outcomes_known_stale_changed_and_neither():
    listed = Entry("extremes", "a mean of maxima")
    assert outcome(listed, result("extremes", CheckStatus.FAIL)) == "known"
    assert outcome(listed, result("extremes", CheckStatus.PASS)) == "stale"
    assert outcome(listed, result("extremes", CheckStatus.ERROR)) == "changed"  # an error is never known
    assert outcome(listed, result("extremes", CheckStatus.SKIP)) is None
    assert outcome(None, result("extremes", CheckStatus.FAIL)) is None


def test_only_known_failures_pass_and_keep_every_status():
    report = held_to([Entry("extremes", "a mean of maxima", "https://example.org/1"), Entry("partition", "cut")],
                     result("extremes", CheckStatus.FAIL), result("short_window", CheckStatus.PASS))  # fmt: skip
    data = json.loads(report.to_json())
    assert data["status"] == "fail" and data["verdict"] == "pass"
    assert data["baseline"] == {"file": "known.toml", "known": ["extremes"], "stale": [], "changed": [],
                                "not_run": ["partition"], "unpinned": ["extremes", "partition"]}  # fmt: skip
    first, second = data["checks"]
    assert (first["status"], first["known"], first["stale"]) == ("fail", True, False)
    assert (first["baseline_reason"], first["baseline_link"]) == ("a mean of maxima", "https://example.org/1")
    assert (second["known"], second["baseline_reason"]) == (False, None)
    lines = render_terminal(report).splitlines()
    assert lines[0].startswith("GRPO statistics verify: PASS (1 known failure)  target=reference-grpo")
    assert lines[1].startswith("baseline known.toml: 2 entries pin no metrics (the check-level form")
    assert lines[2].startswith("known FAIL  extremes") and lines[2].endswith("(baseline: a mean of maxima)")
    markdown = render_markdown(report)
    assert markdown.startswith("## GRPO statistics verify: PASS (1 known failure)")
    assert "| extremes | extremes | known fail |" in markdown and "### Failing metrics" not in markdown


def test_a_new_failure_or_a_stale_entry_fails_the_run():
    new = held_to([Entry("extremes", "a mean of maxima")],
                  result("extremes", CheckStatus.FAIL), result("short_window", CheckStatus.FAIL))  # fmt: skip
    assert new.verdict is CheckStatus.FAIL and "FAIL  short_window" in render_terminal(new)
    stale = held_to([Entry("extremes", "a mean of maxima")], result("extremes", CheckStatus.PASS))
    assert (stale.status, stale.verdict) == (CheckStatus.PASS, CheckStatus.FAIL)
    text = render_terminal(stale)
    assert "(0 known failures, 1 stale baseline entry)" in text
    assert "STALE extremes  passes: remove it from the baseline known.toml" in text
    assert "| stale | passes: remove it from the baseline" in render_markdown(stale)
    assert json.loads(stale.to_json())["checks"][0]["stale"] is True


def test_a_listed_check_that_errored_is_not_known():
    report = held_to([Entry("extremes", "a mean of maxima")], result("extremes", CheckStatus.ERROR))
    assert not report.known(report.checks[0]) and report.verdict is CheckStatus.ERROR


def test_no_baseline_keeps_verify_json_as_it_was():
    report = Report(target="reference-grpo", device="cpu", algorithm="grpo")
    report.add(result("extremes", CheckStatus.FAIL))
    data = report.as_dict()
    assert "verdict" not in data and "baseline" not in data and "known" not in data["checks"][0]


# ---------------------------------------------------------------- written


def test_written_then_read_back(tmp_path):
    odd = 'a "quoted" reason \\ with a tab\tand\nnewline \x7f'
    report = held_to([Entry("extremes", odd, "https://example.org/1"), Entry("partition", "fixed since")],
                     result("short_window", CheckStatus.FAIL), result("extremes", CheckStatus.FAIL),
                     result("partition", CheckStatus.PASS), result("freshness", CheckStatus.PASS))  # fmt: skip
    path = tmp_path / "sub" / "written.toml"
    assert write(path, report) == 2
    back = load(path, "grpo")
    assert back.entries == tuple(failed_entries(report))
    assert back.entries == (  # each pins what failed: here no metric (the results have none) and no other problem
        Entry("short_window", "1 metric(s) disagree: entropy", pins=Pins()),
        Entry("extremes", odd, "https://example.org/1", pins=Pins()),
    )
    assert path.read_text(encoding="utf-8").startswith("# Known failures of the gate on target reference-grpo")


# ---------------------------------------------------------------- the gate, end to end


def junit_outcomes(report_dir: Path) -> dict[str, str]:
    """JUnit test case name -> 'failure', 'skipped:<type>' or 'pass'."""
    got = {}
    for case in ET.parse(report_dir / "verify.xml").getroot().iter("testcase"):
        child = next(iter(case), None)
        got[case.get("name")] = "pass" if child is None else f"{child.tag}:{child.get('type', '')}".rstrip(":")
    return got


@pytest.mark.slow  # gate processes: the full tier
def test_a_baselined_failure_exits_0_and_is_shown_as_known(tmp_path):
    known = baseline_file(tmp_path, entry("short_window", "entropy logged 0.5 high", "https://example.org/2"))
    written = tmp_path / "rewritten.toml"
    out = tmp_path / "out"
    code, report, output = verify(out, "--target", BROKEN, "--check", "short_window", "--baseline", str(known),
                                  "--write-baseline", str(written))  # fmt: skip
    assert code == 0, output[-3000:]
    assert "PASS (1 known failure)" in output and "known FAIL  short_window" in output, output[-3000:]
    assert "(baseline: entropy logged 0.5 high)" in output and "1 xfailed" in output
    (check,) = report["checks"]
    assert (check["status"], check["known"], check["baseline_link"]) == ("fail", True, "https://example.org/2")
    assert (report["status"], report["verdict"]) == ("fail", "pass")
    assert junit_outcomes(out)["test_check[short_window]"] == "skipped:pytest.xfail"
    assert "known fail" in (out / "verify.md").read_text(encoding="utf-8")
    (rewritten,) = load(written, "grpo").entries  # the known failure keeps its reason and link, its metrics pinned
    assert (rewritten.check, rewritten.reason, rewritten.link) == ("short_window", "entropy logged 0.5 high",
                                                                   "https://example.org/2")  # fmt: skip
    assert "entropy" in rewritten.pins.by_key


@pytest.mark.slow  # gate processes: the full tier
def test_a_baselined_check_that_passes_exits_1_saying_remove_it(tmp_path):
    known = baseline_file(tmp_path, entry("short_window", "entropy logged 0.5 high"))
    out = tmp_path / "out"
    code, report, output = verify(out, "--target", "reference-grpo", "--check", "short_window",
                                  "--baseline", str(known))  # fmt: skip
    assert code == 1, output[-3000:]
    assert f"STALE short_window  passes: remove it from the baseline {known}" in output
    assert report["checks"][0]["status"] == "pass" and report["baseline"]["stale"] == ["short_window"]
    assert report["verdict"] == "fail" and junit_outcomes(out)["test_check[short_window]"] == "failure"


@pytest.mark.slow  # gate processes: the full tier
def test_a_new_failure_exits_1_and_an_entry_not_run_is_neither(tmp_path):
    known = baseline_file(tmp_path, entry("short_window", "entropy logged 0.5 high") + entry("partition"))
    written = tmp_path / "today.toml"
    out = tmp_path / "out"
    code, report, output = verify(out, "--target", BROKEN, "--check", "short_window", "--check", "extremes",
                                  "--baseline", str(known), "--write-baseline", str(written))  # fmt: skip
    assert code == 1, output[-3000:]
    assert "known FAIL  short_window" in output and "\nFAIL  extremes" in output
    assert report["baseline"] == {"file": str(known), "known": ["short_window"], "stale": [], "changed": [],
                                  "not_run": ["partition"], "unpinned": ["short_window", "partition"]}  # fmt: skip
    assert junit_outcomes(out)["test_check[extremes]"] == "failure"
    # today's failures, in report order: the known one keeps its reason, the new one says what failed first
    (first, second) = load(written, "grpo").entries
    assert (first.check, first.reason, first.link) == ("short_window", "entropy logged 0.5 high", None)
    assert second.check == "extremes" and second.reason.startswith("entropy: logged=")


OWN_TESTS = '''
from harness.algorithms import case
from harness.report import assert_passed


def test_known(ppo_cache, ppo_run_spec, ppo_report):
    assert_passed(ppo_report.add(case("short_window", "grpo").run(ppo_cache, ppo_run_spec)))


def test_known_check_but_another_failure(ppo_cache, ppo_run_spec, ppo_report):
    ppo_report.add(case("short_window", "grpo").run(ppo_cache, ppo_run_spec))
    assert False, "something else"
'''


@pytest.mark.slow  # gate processes: the full tier
def test_own_tests_under_pytest_fail_only_for_what_is_not_known(tmp_path):
    known = baseline_file(tmp_path, entry("short_window", "entropy logged 0.5 high"))
    (tmp_path / "test_own.py").write_text(OWN_TESTS, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_own.py", f"--ppo-target={BROKEN}",
         f"--ppo-baseline={known}", "-q", "-rfx"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "GITHUB_STEP_SUMMARY": ""},
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed, 1 xfailed" in output, output[-3000:]
    assert "XFAIL test_own.py::test_known" in output and "FAILED test_own.py::test_known_check_but_another" in output
