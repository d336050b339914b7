"""`python -m mutants mutmut --algorithm grpo`: mutmut over the GRPO trainer with the GRPO gate as its tests.

No real mutmut run here (one takes minutes): the scratch configuration each algorithm gets, the
hooks plugin's modules, `--functions` over GRPO functions, and the report, triage and baseline of a
GRPO run, kept apart from PPO's.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import json
import types
from pathlib import Path

import pytest

from mutants import __main__ as cli
from mutants import markdown, mutmut_hooks, mutmut_run, mutmut_scratch, report, schema, scoring, selection
from mutants.model import MutantRecord, MutmutResults
from mutants.mutmut_algorithms import (
    ALGORITHMS,
    RANK_TESTS,
    config_problems,
    module_names,
    mutmut_config,
    named_target,
    scratch_config,
)
from tests.support.mutmut_records import record

ROOT = Path(__file__).resolve().parents[2]
GRPO = ALGORITHMS["grpo"]
PPO = ALGORITHMS["ppo"]
GRPO_SOURCES = {path: (ROOT / path).read_text(encoding="utf-8") for path in GRPO.files}


def grpo_record(name: str, status: str, function: str, file: str = "reference_trainers/grpo.py") -> MutantRecord:
    """A mutmut record of a GRPO `function` as mutmut_results.json holds it."""
    return record(name, status, function, file)


def grpo_results(selected: tuple[str, ...], *records: MutantRecord) -> MutmutResults:
    """The results of a GRPO mutmut run over `selected` (the whole files where empty)."""
    sources = dict(GRPO_SOURCES)
    return MutmutResults(
        0, 10.0, 1, ("pooled_stats",), GRPO.trainer, sources[GRPO.trainer], records, None, None, None,
        sources, selected, "grpo",
    )  # fmt: skip


def test_each_algorithm_mutates_its_own_files_against_its_own_target():
    common = "reference_trainers/common.py"  # what both trainers use: mutated under both gates
    assert PPO.files == mutmut_run.MUTATED_FILES
    assert PPO.files == ("reference_trainers/ppo.py", "reference_trainers/ppo_config.py", common)
    assert GRPO.files == ("reference_trainers/grpo.py", "reference_trainers/grpo_config.py", common)
    assert GRPO.trainer == GRPO.files[0] and PPO.trainer == PPO.files[0]
    assert (PPO.target, GRPO.target) == ("reference", "reference-grpo")
    assert PPO.triage_file != GRPO.triage_file and PPO.baseline_section != GRPO.baseline_section
    assert set(mutmut_hooks.mutated_modules()) == set(module_names())  # the hooks plugin restores every one's names
    assert "reference_trainers.grpo_config" in mutmut_hooks.mutated_modules()


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_the_scratch_config_mutates_the_algorithms_files_and_tests_its_target(tmp_path, name):
    algo = ALGORITHMS[name]
    scratch = mutmut_scratch.prepare_scratch(tmp_path / "scratch", algo=algo)
    config = mutmut_config(scratch / "pyproject.toml")
    assert config["only_mutate"] == list(algo.files)
    args = config["pytest_add_cli_args"]
    assert named_target(args) == algo.target and args[-2:] == ["--ppo-target", algo.target]
    project = mutmut_config(ROOT / "pyproject.toml")
    assert args[:-2] == project["pytest_add_cli_args"]  # the rest as the project has it
    selection = "pytest_add_cli_args_test_selection"
    # the gate, then the trainer's own tests, then the two-process gate where the algorithm has rank functions
    assert config[selection] == [*project[selection], *algo.unit_tests, *([RANK_TESTS] if algo.rank_functions else [])]
    for path in algo.unit_tests:
        assert (scratch / path).read_text(encoding="utf-8") == (ROOT / path).read_text(encoding="utf-8")
    rewritten = ("only_mutate", "pytest_add_cli_args", selection)
    assert {k: v for k, v in config.items() if k not in rewritten} == {
        k: v for k, v in project.items() if k not in rewritten
    }
    for path in algo.files:
        original = (ROOT / path).read_text(encoding="utf-8")
        assert (scratch / mutmut_scratch.PRISTINE / path).read_text(encoding="utf-8") == original
        assert mutmut_scratch.pragma_problems(original, path) == []  # the pragma rules hold for GRPO's files too


def test_grpo_links_its_rank_functions_to_the_two_process_gate_in_mutmuts_names(tmp_path):
    # mutmut names a method xǁClassǁmethod in its module, a function x_function (its stats and mutants use these)
    assert GRPO.rank_functions and not PPO.rank_functions
    assert "reference_trainers.grpo.x\u01c1GRPOTrainer\u01c1window_step" in GRPO.rank_links
    assert len(GRPO.rank_links) == len(GRPO.rank_functions)
    for entry in GRPO.rank_functions:  # every one names a real function of a mutated file
        module, _, function = entry.partition(":")
        assert module.replace(".", "/") + ".py" in GRPO.files
        owner = importlib.import_module(module)
        for part in function.split("."):
            owner = getattr(owner, part)
        assert callable(owner)
    assert (ROOT / RANK_TESTS).is_file()
    assert mutmut_scratch.write_rank_links(tmp_path, PPO) is None
    written = json.loads(mutmut_scratch.write_rank_links(tmp_path, GRPO).read_text(encoding="utf-8"))
    assert written == {"tests": [RANK_TESTS], "functions": list(GRPO.rank_links)}


def test_the_hooks_plugin_adds_the_rank_functions_to_the_linked_test_in_the_stats_run_only(tmp_path, monkeypatch):
    from mutmut.state import state

    links = mutmut_scratch.write_rank_links(tmp_path, GRPO)
    monkeypatch.setenv(mutmut_hooks.LINKS_ENV, str(links))
    item = types.SimpleNamespace(nodeid=f"{RANK_TESTS}::test_the_gate_across_two_processes")
    other = types.SimpleNamespace(nodeid="harness/suite/test_verify.py::test_check[uneven_lengths]")
    assert mutmut_hooks.is_linked(item.nodeid, mutmut_hooks.rank_links())
    assert mutmut_hooks.is_linked("mutants/" + item.nodeid, mutmut_hooks.rank_links())
    assert not mutmut_hooks.is_linked(other.nodeid, mutmut_hooks.rank_links())
    state()._stats.clear()
    monkeypatch.setattr(mutmut_hooks, "_stats_run", False)
    mutmut_hooks.pytest_runtest_teardown(item, None)
    assert not state()._stats  # outside the stats run nothing is linked
    monkeypatch.setattr(mutmut_hooks, "_stats_run", True)
    mutmut_hooks.pytest_runtest_teardown(other, None)
    assert not state()._stats  # nor another test
    mutmut_hooks.pytest_runtest_teardown(item, None)
    assert state()._stats == set(GRPO.rank_links)
    state()._stats.clear()


def test_the_projects_mutmut_config_is_ppos_and_names_no_target():
    project = mutmut_config(ROOT / "pyproject.toml")
    assert config_problems(project, PPO, None) == []
    wrong = dict(project, only_mutate=list(GRPO.files))
    assert "only_mutate must list exactly reference_trainers/ppo.py" in config_problems(wrong, PPO, None)[0]
    targeted = dict(project, pytest_add_cli_args=[*project["pytest_add_cli_args"], "--ppo-target=trl"])
    assert named_target(targeted["pytest_add_cli_args"]) == "trl"
    assert "name no --ppo-target" in config_problems(targeted, PPO, None)[0]
    assert "pass --ppo-target reference-grpo" in config_problems(project, GRPO, GRPO.target)[-1]
    assert GRPO.unit_tests and any("must list tests/trainers/test_grpo_config.py" in p
                                   for p in config_problems(project, GRPO, GRPO.target))  # fmt: skip


def test_a_project_config_that_names_a_target_is_refused_before_mutmut_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "--ppo-target" not in text.partition("[tool.mutmut]")[2]
    with pytest.raises(RuntimeError, match="one line"):
        scratch_config(text.replace('only_mutate = ["', 'only_mutate = [\n    "'), GRPO)
    rewritten = scratch_config(text, GRPO)
    assert rewritten.partition("[tool.mutmut]")[0] == text.partition("[tool.mutmut]")[0]  # the rest untouched

    monkeypatch.setattr(mutmut_scratch, "copy_project", lambda dest, root: _copy_with(dest, root, rewritten))
    monkeypatch.setattr(mutmut_run, "run_mutmut", lambda *a, **k: pytest.fail("mutmut must not run"))
    assert mutmut_run.run_in_scratch(tmp_path / "scratch", tmp_path, 1, 10.0, (), GRPO) == 2
    assert "pyproject.toml: [tool.mutmut] only_mutate must list exactly" in capsys.readouterr().out


def _copy_with(dest: Path, root: Path, pyproject: str) -> Path:
    """The project copied to `dest` with `pyproject` as its pyproject.toml."""
    from mutants.project import copy_project

    copy_project(dest, root)
    (dest / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    return dest


def test_grpo_function_names_become_globs_of_the_grpo_modules():
    functions = ("pooled_stats", "GRPOTrainer.micro_step", "GRPOConfig.__post_init__")
    globs, problems = selection.select(functions, GRPO_SOURCES)
    assert problems == []
    sep = "\u01c1"
    assert globs == [
        "reference_trainers.grpo.x_pooled_stats__mutmut_*",
        f"reference_trainers.grpo.x{sep}GRPOTrainer{sep}micro_step__mutmut_*",
        f"reference_trainers.grpo_config.x{sep}GRPOConfig{sep}__post_init____mutmut_*",
    ]
    names = [
        "reference_trainers.grpo.x_pooled_stats__mutmut_4",
        "reference_trainers.ppo.x_pooled_stats__mutmut_4",  # PPO's function of the same name is not taken
        f"reference_trainers.grpo_config.x{sep}GRPOConfig{sep}__post_init____mutmut_2",
    ]
    taken = [n for n in names if any(fnmatch.fnmatch(n, g) for g in globs)]
    assert [selection.function_name(n) for n in taken] == ["pooled_stats", "GRPOConfig.__post_init__"]
    _, problems = selection.select(("compute_gae",), GRPO_SOURCES)  # a PPO function: not in a GRPO run
    assert problems and "'compute_gae' is defined in no mutated file" in problems[0]
    shared, problems = selection.select(("masked_mean", "sample_responses"), GRPO_SOURCES)  # common.py's, in GRPO
    assert problems == [] and shared == [
        "reference_trainers.common.x_masked_mean__mutmut_*",
        "reference_trainers.common.x_sample_responses__mutmut_*",
    ]


def test_the_command_line_passes_the_algorithm_on_and_defaults_to_ppo(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(mutmut_run, "run", lambda *args, **kwargs: seen.append((*args, kwargs["algorithm"])) or 2)
    common = ["mutmut", "--report-dir", str(tmp_path)]
    assert cli.main([*common, "--algorithm", "grpo", "--functions", "pooled_stats"]) == 2
    assert cli.main(common) == 2
    assert [(args[4], args[5]) for args in seen] == [(("pooled_stats",), "grpo"), ((), "ppo")]
    with pytest.raises(SystemExit) as usage:
        cli.main([*common, "--algorithm", "dpo"])
    assert usage.value.code == 2


def test_grpo_results_read_back_and_older_results_are_ppos():
    run = grpo_results(("pooled_stats",), grpo_record("x_pooled_stats__mutmut_1", "killed", "pooled_stats"))
    assert MutmutResults.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    older = {k: v for k, v in run.to_dict().items() if k != "algorithm"}
    assert MutmutResults.from_dict(older).algorithm == "ppo"


def test_the_report_says_which_trainer_and_target_a_run_covers():
    run = grpo_results((), grpo_record("x_pooled_stats__mutmut_1", "killed", "pooled_stats"))
    summary = scoring.score(run.mutants)
    text = "\n".join(markdown.mutmut_summary(run, summary, None))
    assert "## mutmut over the whole GRPO trainer" in text and "against the target `reference-grpo`" in text
    assert "`reference_trainers/grpo.py`, `reference_trainers/grpo_config.py`, `reference_trainers/common.py`" in text
    selected = dataclasses.replace(run, selected=("pooled_stats",))
    assert "## mutmut over the GRPO trainer: selected functions only" in markdown.mutmut_summary(
        selected, summary, None
    )


def test_grpo_mutants_share_grpo_pys_file_entry_with_the_curated_grpo_mutants():
    in_config = grpo_record("x\u01c1GRPOConfig\u01c1__post_init____mutmut_3", "killed", "GRPOConfig.__post_init__")
    in_config = dataclasses.replace(in_config, file="reference_trainers/grpo_config.py")
    run = grpo_results((), grpo_record("x_pooled_stats__mutmut_1", "killed", "pooled_stats"), in_config)
    trainer_source = (ROOT / PPO.trainer).read_text(encoding="utf-8")
    assert report.trainer_source(run) == ""  # a GRPO run carries no copy of the PPO trainer
    doc, unplaced = schema.schema_report(None, run, trainer_source, baseline=None)
    assert schema.validate(doc) == [] and unplaced == []
    assert [m["id"] for m in doc["files"]["reference_trainers/grpo.py"]["mutants"]] == ["x_pooled_stats__mutmut_1"]
    assert len(doc["files"]["reference_trainers/grpo_config.py"]["mutants"]) == 1
    assert doc["files"][PPO.trainer]["mutants"] == []


def test_grpo_survivors_are_triaged_in_their_own_file(tmp_path):
    survivor = grpo_record("x_pooled_stats__mutmut_9", "survived", "pooled_stats")
    _, problems, _ = scoring.triage((survivor,), [], (), GRPO.triage_file)
    assert problems and "untriaged survivor x_pooled_stats__mutmut_9" in problems[0]
    assert f"mutants/{GRPO.triage_file}" in problems[0]
    entries, problems = scoring.load_triage(scoring.HERE / GRPO.triage_file)
    assert problems == [] and entries, f"mutants/{GRPO.triage_file} triages the GRPO survivors"
    assert all(e.column is not None and not e.name for e in entries), "keyed by description (triage refresh)"
    functions = {path: selection.defined_functions((ROOT / path).read_text(encoding="utf-8")) for path in GRPO.files}
    assert all(any(e.function in f for f in functions.values()) for e in entries)
    ppo_entries, _ = scoring.load_triage(scoring.HERE / PPO.triage_file)
    # only common.py's mutants, run under both gates, may be triaged in both files (for each gate apart), and the
    # functions each trainer has of its own under one name (pooled_stats in ppo.py and in grpo.py)
    ppo_own = set().union(*(selection.defined_functions((ROOT / p).read_text(encoding="utf-8")) for p in PPO.files))
    shared = {e.key for e in entries} & {e.key for e in ppo_entries}
    assert all(key[0] in functions["reference_trainers/common.py"] or key[0] in ppo_own for key in shared)
    # a function name is defined once among an algorithm's files: the triage key needs no file
    for algo in (PPO, GRPO):
        defined = [selection.defined_functions((ROOT / p).read_text(encoding="utf-8")) for p in algo.files]
        assert sum(len(d) for d in defined) == len(set().union(*defined)), algo.name


def test_a_grpo_run_has_its_baselines_apart_from_ppos(tmp_path):
    ppo = {"mutmut": {"score": 70.0}, report.SELECTIONS: [{"functions": ["pooled_stats"], "score": 97.0}]}
    whole = grpo_results((), grpo_record("x_pooled_stats__mutmut_1", "killed", "pooled_stats"))
    selected = dataclasses.replace(whole, selected=("pooled_stats",))
    assert report.run_baseline(ppo, whole) is None and report.run_baseline(ppo, selected) is None
    assert "grpo" not in ppo  # reading a baseline adds nothing to it
    summary = scoring.score(whole.mutants)
    assert report.mutmut_problems(whole, summary, None, "baseline.json") != []  # a whole run needs its baseline

    path = tmp_path / "baseline.json"
    data = json.loads(json.dumps(ppo))
    report.record_baseline(path, data, selected, summary)
    report.record_baseline(path, json.loads(path.read_text(encoding="utf-8")), whole, summary)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert {k: v for k, v in written.items() if k != "grpo"} == ppo  # PPO's scores untouched
    assert written["grpo"]["mutmut"]["score"] == 100.0
    assert written["grpo"]["mutmut"]["files"] == list(GRPO.files)
    (entry,) = written["grpo"][report.SELECTIONS]
    assert entry["functions"] == ["pooled_stats"] and entry["files"] == ["reference_trainers/grpo.py"]
    assert report.run_baseline(written, selected) == 100.0 and report.run_baseline(written, whole) == 100.0


def test_the_report_fails_on_an_untriaged_grpo_survivor_as_on_a_ppo_one(tmp_path, capsys):
    survivor = grpo_record("x_pooled_stats__mutmut_999", "survived", "pooled_stats")
    run = grpo_results(("pooled_stats",), grpo_record("x_pooled_stats__mutmut_1", "killed", "pooled_stats"), survivor)
    (tmp_path / "mutmut_results.json").write_text(json.dumps(run.to_dict()), encoding="utf-8")
    assert report.write_reports(tmp_path, install_elements=False) == 1
    err = capsys.readouterr().err
    assert "untriaged survivor x_pooled_stats__mutmut_999" in err and GRPO.triage_file in err
    md = (tmp_path / "mutation.md").read_text(encoding="utf-8")
    assert "## mutmut over the GRPO trainer" in md
    assert md.startswith("# GRPO statistics gate: mutation testing") and "PPO" not in md.splitlines()[0]
