"""A mutant whose session exits 2 is judged only by why: the harness's configuration error is the gate refusing the
mutated trainer (detected); anything else (an interruption, a collection error) is rerun once, serially, and one
still unjudged then is counted apart and said in one line, never as detected or survived."""

from __future__ import annotations

import dataclasses
import json
import types

from mutants import mutmut_hooks, mutmut_run, scoring
from mutants.model import MutantStatus
from tests.support.mutmut_records import record


def test_the_plugin_says_why_a_session_exited_2(tmp_path, monkeypatch):
    from harness.plugin import CONFIG_ERROR

    def session(errors, shouldstop=False):
        stash = {CONFIG_ERROR: errors}
        config = types.SimpleNamespace(stash=types.SimpleNamespace(get=lambda key, default: stash.get(key, default)))
        return types.SimpleNamespace(
            config=config, exitstatus=2, shouldstop=shouldstop, shouldfail=False, testsfailed=0, testscollected=3
        )

    assert mutmut_hooks.exit2_reason(session(["temperature must be positive"])) == {
        "configuration": True,
        "detail": "temperature must be positive",
    }
    assert mutmut_hooks.exit2_reason(session([]))["configuration"] is False
    monkeypatch.setenv("MUTANT_UNDER_TEST", "m.x_f__mutmut_1")
    (tmp_path / mutmut_run.EXIT2_DIR).mkdir()
    monkeypatch.setenv(mutmut_hooks.EXIT2_ENV, str(tmp_path / mutmut_run.EXIT2_DIR))
    mutmut_hooks.pytest_sessionfinish(session(["bad"]), 2)
    assert mutmut_run.exit2_reasons(tmp_path) == {
        "m.x_f__mutmut_1": {"name": "m.x_f__mutmut_1", "configuration": True, "detail": "bad"}
    }
    quiet = session([])
    quiet.exitstatus = 1
    monkeypatch.setenv("MUTANT_UNDER_TEST", "m.x_f__mutmut_2")
    mutmut_hooks.pytest_sessionfinish(quiet, 1)  # only an exit 2 is explained
    assert list(mutmut_run.exit2_reasons(tmp_path)) == ["m.x_f__mutmut_1"]


def test_a_refusal_is_detected_and_an_unexplained_exit_2_is_neither_detected_nor_survived():
    refused = dataclasses.replace(record("x_f__mutmut_1", "check was interrupted by user", "f"), exit_code=2)
    other = dataclasses.replace(refused, name="reference_trainers.ppo.x_f__mutmut_2")
    reasons = {refused.name: {"configuration": True, "detail": "learning_rate must be >= 0"}}
    records, ambiguous = mutmut_run.judge_exit2([refused, other], reasons)
    assert [r.status for r in records] == [MutantStatus.REFUSED, MutantStatus.INTERRUPTED]
    assert ambiguous == [other.name]  # rerun once, serially, by the driver
    summary = scoring.score(tuple(records))
    assert (summary.detected, summary.undetected, summary.unjudged, summary.score) == (1, 0, 1, 100.0)
    reasons[other.name] = {"configuration": False, "detail": "0 failed of 3 collected (interrupted, collection error)"}
    line = mutmut_run.unjudged_line(records, reasons)
    assert line == (
        "mutmut: 1 mutant(s) not judged, left out of the score (neither detected nor survived): 1 check was "
        "interrupted by user (exit 2: 0 failed of 3 collected (interrupted, collection error))"
    )
    assert mutmut_run.unjudged_line(records[:1], reasons) is None
    assert json.loads(json.dumps(records[0].to_dict()))["status"] == "refused (configuration error)"


def test_a_check_whose_run_the_mutated_trainer_refused_is_a_configuration_error_of_the_session():
    """The engine errs one check whose run could not be configured and the others run: the session's exit 2 is
    still the gate refusing the mutated trainer, said in the check's own words."""
    from harness.plugin import GATE
    from harness.report import Report
    from harness.verdict import CheckId

    report = Report(target="reference", device="cpu")
    report.add_unconfigured(CheckId("uneven_split"), "learning_rate must be >= 0")
    stash = {GATE: types.SimpleNamespace(report=report)}
    config = types.SimpleNamespace(stash=types.SimpleNamespace(get=lambda key, default: stash.get(key, default)))
    session = types.SimpleNamespace(config=config, exitstatus=2, shouldstop=False, shouldfail=False, testsfailed=1,
                                    testscollected=3)  # fmt: skip
    assert mutmut_hooks.exit2_reason(session) == {
        "configuration": True,
        "detail": "configuration error: learning_rate must be >= 0",
    }
