"""Applicability: a check a target declares it cannot run is reported not applicable with the declared reason and
counted, never a failure; a check whose run could not be configured errs alone, the others still run and report,
and the run exits 2 naming it (harness/targets/__init__.py, harness/plugin.py, harness/report/)."""

from __future__ import annotations

import json
import types

import pytest

from harness.baseline import Baseline, Entry
from harness.engine import not_applicable_entries
from harness.errors import HarnessConfigError
from harness.report import Report
from harness.report.markdown import render_markdown
from harness.report.terminal import render_terminal
from harness.targets import Target, declared_not_applicable, matches, resolve
from harness.verdict import CheckId, CheckResult, CheckStatus
from tests.support.gate_run import verify
from tests.support.no_vespo import REASON

DOUBLE = "tests.support.no_vespo"
VESPO = "uneven_lengths[loss_type=vespo]"
GRPO = "uneven_lengths[loss_type=grpo]"
OTHER_VESPO = "gradient_partition[loss_type=vespo]"


def test_a_declaration_names_checks_by_parameter_id_or_pattern():
    vespo = CheckId("uneven_lengths", (("loss_type", "vespo"),))
    assert matches("loss_type=vespo", vespo) and not matches("loss_type=grpo", vespo)
    assert matches("uneven_lengths[loss_type=vespo]", vespo) and matches("uneven_*", vespo)
    assert not matches("uneven_lengths", vespo) and not matches("scale_rewards=vespo", vespo)
    target = Target("t", "grpo", print, not_applicable=(("loss_type=vespo", "no vespo"), ("advantages*", "none")))
    assert target.not_applicable_reason(vespo) == "no vespo"
    assert target.not_applicable_reason(CheckId("advantages", (("scale_rewards", "batch"),))) == "none"
    assert target.not_applicable_reason(CheckId("uneven_lengths", (("loss_type", "grpo"),))) is None
    assert target.unmatched([vespo]) == ["advantages*"]


@pytest.mark.parametrize("declared", [["loss_type=vespo"], {"loss_type=vespo": ""}, {"loss_type=vespo": 1}, {3: "x"}])
def test_a_malformed_declaration_is_a_configuration_error(declared):
    factory = types.SimpleNamespace(not_applicable=declared)
    with pytest.raises(HarnessConfigError, match="`not_applicable` of the factory must be a dict"):
        declared_not_applicable(factory)


def test_resolve_reads_the_declaration_and_refuses_one_that_names_no_check():
    assert resolve(f"{DOUBLE}:declaring").not_applicable == (("loss_type=vespo", REASON),)
    assert resolve(f"{DOUBLE}:refusing").not_applicable == ()
    with pytest.raises(HarnessConfigError, match="declares not applicable 'loss_type=vespa', which names no check"):
        resolve(f"{DOUBLE}:misspelt")


def report_of(*checks: CheckResult) -> Report:
    return Report(target="t", device="cpu", seed=0, dtype="float32", algorithm="grpo", torch="x", checks=list(checks))


def test_a_check_not_applicable_is_said_with_its_reason_counted_and_never_a_failure():
    passed = CheckResult(CheckId("uneven_lengths", (("loss_type", "grpo"),)), CheckStatus.PASS)
    skipped = CheckResult(CheckId("uneven_lengths", (("loss_type", "vespo"),)), CheckStatus.NOT_APPLICABLE,
                          notes=("no vespo",))  # fmt: skip
    report = report_of(passed, skipped)
    assert report.status is CheckStatus.PASS
    lines = render_terminal(report).splitlines()
    assert lines[0].startswith("GRPO statistics verify: PASS (1 not applicable)  target=t")
    assert lines[2] == f"n/a   {VESPO}  not applicable: no vespo"
    data = json.loads(report.to_json())
    assert data["status"] == "pass" and data["checks"][1]["status"] == "not_applicable"
    assert data["checks"][1]["message"] == "no vespo"
    markdown = render_markdown(report)
    assert "statistics verify: PASS (1 not applicable)" in markdown
    assert f"| {VESPO} | uneven_lengths | not_applicable | no vespo |" in markdown
    # nothing verified is not a pass
    assert report_of(skipped).status is CheckStatus.ERROR
    assert "(1 not applicable)" not in render_terminal(report_of(passed))


def test_a_baseline_entry_for_a_check_declared_not_applicable_is_named():
    target = resolve(f"{DOUBLE}:declaring")
    baseline = Baseline("b.toml", (Entry(GRPO, "r"), Entry(VESPO, "r")))
    assert not_applicable_entries(baseline, target) == [VESPO]
    assert not_applicable_entries(Baseline("b.toml", (Entry(GRPO, "r"),)), target) == []


def gate(tmp_path, target: str, *checks: str, extra: tuple[str, ...] = ()):
    return verify(tmp_path, "--target", f"{DOUBLE}:{target}", *(f"--check={c}" for c in checks), *extra)


@pytest.mark.slow
def test_without_the_declaration_the_refused_checks_err_and_the_others_still_report(tmp_path):
    code, report, out = gate(tmp_path, "refusing", VESPO, GRPO, OTHER_VESPO)
    assert code == 2, out
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses == {GRPO: "pass", VESPO: "error", OTHER_VESPO: "error"}, out
    refused = next(c for c in report["checks"] if c["id"] == VESPO)
    assert refused["message"].startswith("configuration error: no-vespo target: loss_type='vespo'")
    said = [line for line in out.splitlines() if line.startswith("CONFIG ERROR")]
    assert said[-1].startswith(f"CONFIG ERROR 2 checks could not be configured: {VESPO}, {OTHER_VESPO}; "), out
    assert "factory.not_applicable" in said[-1] and len(said) == 1, out
    erred = [line for line in out.splitlines() if line.startswith("ERROR ")]  # each refusal on its check's line
    assert len(erred) == 2 and all("configuration error: no-vespo target" in line for line in erred), out


@pytest.mark.slow
def test_with_the_declaration_the_run_passes_and_counts_them(tmp_path):
    code, report, out = gate(tmp_path, "declaring", VESPO, GRPO, OTHER_VESPO)
    assert code == 0, out
    assert {c["id"]: (c["status"], c["message"]) for c in report["checks"]} == {
        GRPO: ("pass", ""), VESPO: ("not_applicable", REASON), OTHER_VESPO: ("not_applicable", REASON)
    }  # fmt: skip
    assert "GRPO statistics verify: PASS (2 not applicable)" in out and f"not applicable: {REASON}" in out
    junit = (tmp_path / "verify.xml").read_text()
    assert junit.count(f'<skipped type="pytest.skip" message="not applicable: {REASON}"') == 2, junit
    assert "(2 not applicable)" in (tmp_path / "verify.md").read_text()


@pytest.mark.slow
def test_a_declaration_that_names_no_check_or_a_baseline_entry_for_one_is_one_line_and_exit_2(tmp_path):
    code, report, out = gate(tmp_path / "typo", "misspelt", GRPO)
    assert code == 2 and "'loss_type=vespa', which names no check of the grpo gate" in out, out
    assert [c["status"] for c in report["checks"]] == ["error"]
    baseline = tmp_path / "known.toml"
    baseline.write_text(f'[[known]]\ncheck = "{VESPO}"\nreason = "r"\n')
    code, _, out = gate(tmp_path / "b", "declaring", GRPO, extra=("--baseline", str(baseline)))
    assert code == 2 and f"check '{VESPO}' is one target" in out and "remove its entry" in out, out


@pytest.mark.slow
def test_a_gate_whose_every_selected_check_is_not_applicable_verified_nothing_and_exits_2(tmp_path):
    code, report, out = gate(tmp_path, "declaring", VESPO, OTHER_VESPO)
    assert code == 2 and "nothing was verified: none of the 2 selected checks ran" in out, out
    assert sorted(c["status"] for c in report["checks"]) == ["error", "not_applicable", "not_applicable"]
