"""`python -m mutants mutmut --functions ...`: mutmut over some functions only, and a report that says so.

No real mutmut run here (one takes minutes): the globs handed to `mutmut run`, the records kept,
the triage and the baseline of such a run, and the report's words are tested on their own.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from pathlib import Path

import pytest

from mutants import __main__ as cli
from mutants import markdown, mutmut_collect, mutmut_run, report, scoring, selection
from mutants.model import MutantRecord, MutmutResults, TriageEntry, TriageVerdict
from tests.support.mutmut_records import record

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {path: (ROOT / path).read_text(encoding="utf-8") for path in mutmut_run.MUTATED_FILES}


def test_function_names_become_globs_of_exactly_their_mutants():
    globs, problems = selection.select(("compute_gae", "masked_sum", "PPOTrainer.micro_step"), SOURCES)
    assert problems == []
    assert globs == [
        "reference_trainers.ppo.x_compute_gae__mutmut_*",
        "reference_trainers.ppo.x_masked_sum__mutmut_*",
        "reference_trainers.ppo.x\u01c1PPOTrainer\u01c1micro_step__mutmut_*",
    ]
    names = [
        "reference_trainers.ppo.x_masked_sum__mutmut_1",
        "reference_trainers.ppo.x_masked_sum_rows__mutmut_1",  # a name that starts with another's is not taken
        "reference_trainers.ppo.x\u01c1PPOTrainer\u01c1micro_step__mutmut_12",
        "reference_trainers.ppo.x\u01c1PPOTrainer\u01c1minibatch_step__mutmut_1",
    ]
    taken = [n for n in names if any(fnmatch.fnmatch(n, g) for g in globs)]
    assert taken == [names[0], names[2]]
    assert [selection.function_name(n) for n in taken] == ["masked_sum", "PPOTrainer.micro_step"]


def test_an_unknown_function_is_a_usage_error_before_mutmut_runs(tmp_path, capsys, monkeypatch):
    _, problems = selection.select(("compute_gea", "PPOTrainer.compute_gae"), SOURCES)
    assert len(problems) == 2 and "'compute_gea' is defined in no mutated file" in problems[0]
    monkeypatch.setattr(mutmut_run, "run_mutmut", lambda *a, **k: pytest.fail("mutmut must not run"))
    code = mutmut_run.run_in_scratch(tmp_path / "scratch", tmp_path, 1, 10.0, ("compute_gea",))
    assert code == 2 and "compute_gea" in capsys.readouterr().out


def test_the_command_line_passes_the_functions_on(monkeypatch, tmp_path):
    seen = {}

    def fake_run(max_children, timeout, report_dir, keep, functions, recheck, algorithm):
        seen.update(max_children=max_children, functions=functions, algorithm=algorithm)
        return 2

    monkeypatch.setattr(mutmut_run, "run", fake_run)
    argv = ["mutmut", "--max-children", "1", "--functions", " compute_gae, PPOTrainer.micro_step,,compute_gae"]
    assert cli.main([*argv, "--report-dir", str(tmp_path)]) == 2
    assert seen == {"max_children": 1, "functions": ("compute_gae", "PPOTrainer.micro_step"), "algorithm": "ppo"}
    assert selection.parse_functions(None) == ()


def test_only_the_selected_functions_mutants_are_kept(monkeypatch):
    records = [
        record("x_compute_gae__mutmut_1", "killed", "compute_gae"),
        record("x_log__mutmut_1", "not checked", "log"),
    ]
    monkeypatch.setattr(
        mutmut_collect, "collect_file", lambda scratch, path: records if path.endswith("/ppo.py") else []
    )
    assert mutmut_collect.collect("scratch", ("compute_gae",)) == records[:1]
    assert mutmut_collect.collect("scratch") == records


def results_of(selected: tuple[str, ...], *records: MutantRecord) -> MutmutResults:
    """mutmut results of a run over `selected` (a run over the whole files where empty)."""
    return MutmutResults(0, 10.0, 1, ("compute_gae",), "reference_trainers/ppo.py", "", records, selected=selected)


def test_a_selected_run_says_it_covers_only_those_functions_and_reads_back():
    run = results_of(("compute_gae",), record("x_compute_gae__mutmut_1", "killed", "compute_gae"))
    assert run.partial and not results_of(()).partial
    assert MutmutResults.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    summary = scoring.score(run.mutants)
    lines = "\n".join(markdown.mutmut_summary(run, summary, None))
    assert "selected functions only" in lines
    assert "ONLY the mutants of 1 functions: `compute_gae` (it says nothing" in lines
    assert "whole trainer" not in lines
    assert "## mutmut over the whole PPO trainer" in markdown.mutmut_summary(results_of(()), summary, None)


def test_triage_of_other_functions_is_not_called_stale_in_a_selected_run():
    entry = TriageEntry("PPOTrainer.log", "x = 0", 5, "0", "1", TriageVerdict.EQUIVALENT, "w")
    records = (record("x_compute_gae__mutmut_1", "killed", "compute_gae"),)
    assert scoring.triage(records, [entry], ("compute_gae",))[1:] == ([], [])
    _, problems, _ = scoring.triage(records, [entry])
    assert problems == [
        "stale triage in mutants/equivalent.toml: PPOTrainer.log: `x = 0` at column 5: '0' -> '1' (equivalent) "
        "describes no mutant now; mutmut made no mutant of PPOTrainer.log (renamed or removed?). "
        "Re-triage: python -m mutants triage"
    ]


def test_a_selected_run_has_its_own_baseline_apart_from_the_whole_file_one(tmp_path):
    whole = {"mutmut": {"score": 70.0, "files": ["reference_trainers/ppo.py"]}}
    run = results_of(("compute_gae", "policy_loss"), record("x_compute_gae__mutmut_1", "killed", "compute_gae"))
    assert report.run_baseline(whole, run) is None  # never compared with a score over other mutants
    assert report.run_baseline(whole, results_of(())) == 70.0
    summary = scoring.score(run.mutants)
    assert report.mutmut_problems(run, summary, None, "baseline.json") == []
    assert report.mutmut_problems(results_of(()), summary, None, "baseline.json") != []

    path = tmp_path / "baseline.json"
    data = json.loads(json.dumps(whole))
    report.record_baseline(path, data, run, summary)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["mutmut"] == whole["mutmut"]
    (entry,) = written[report.SELECTIONS]
    assert entry["functions"] == ["compute_gae", "policy_loss"] and entry["score"] == 100.0
    assert "only these functions" in entry["note"] and entry["files"] == ["reference_trainers/ppo.py"]
    swapped = dataclasses.replace(run, selected=("policy_loss", "compute_gae"))
    assert report.run_baseline(written, swapped) == 100.0
    report.record_baseline(path, written, swapped, summary)  # the same selection replaces its entry
    assert len(json.loads(path.read_text(encoding="utf-8"))[report.SELECTIONS]) == 1
