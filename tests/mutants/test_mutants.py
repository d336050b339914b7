"""The curated mutants, the mutmut driver and the mutation reports.

Fast: the catalogue's patches still apply to the trainer exactly once (no rot),
its metadata covers the PPO bug classes, the report is valid
mutation-testing-report-schema v2, and the mutmut plumbing (pragmas, locations,
triage, score) does what it says. Slow (run in CI): headless Chromium renders
mutation.html. The curated runner kills the whole catalogue end to end in
test_curated_ppo.py and test_curated_grpo.py, one algorithm each.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import html
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from mutants import (
    catalogue,
    curated_output,
    gate_client,
    harness_run,
    html_page,
    locate,
    markdown,
    mutmut_algorithms,
    mutmut_collect,
    mutmut_hooks,
    mutmut_run,
    mutmut_scratch,
    project,
    runner,
    schema,
    scoring,
    verdicts,
)
from mutants.catalogue import load, patches
from mutants.controls import control_name
from mutants.model import (
    ControlResult,
    CuratedResult,
    CuratedRun,
    CuratedStatus,
    Judgement,
    Location,
    MutantCost,
    MutantRecord,
    MutantStatus,
    MutmutResults,
    Position,
    SchemaStatus,
    SuiteStats,
    TriageEntry,
    TriageVerdict,
)

ROOT = Path(__file__).resolve().parents[2]
TRAINER_SOURCE = (ROOT / catalogue.TRAINER).read_text(encoding="utf-8")
GRPO_TRAINER = mutmut_algorithms.ALGORITHMS["grpo"].trainer
COMMON = "reference_trainers/common.py"
"""What both trainers share: a mutant of either algorithm may patch it."""
ENTRIES = ROOT / "mutants" / "catalogue" / load.ENTRIES


# ---------------------------------------------------------------- the catalogue


@pytest.mark.parametrize("mutant", catalogue.MUTANTS, ids=lambda m: m.id)
def test_patch_applies_exactly_once_to_the_current_trainer(mutant, tmp_path):
    for rep in mutant.patch:
        text = (ROOT / rep.file).read_text(encoding="utf-8")
        first = rep.hunk_old.strip().splitlines()[0]
        assert text.count(rep.hunk_old) == 1, f"{mutant.id}: the catalogue has rotted: {first!r}"
        assert rep.old != rep.new
    project.copy_project(tmp_path)
    changed = catalogue.apply(mutant, tmp_path)
    assert changed, "the patch changed no file"
    for path in changed:
        assert path.read_text(encoding="utf-8") != (ROOT / path.relative_to(tmp_path)).read_text(encoding="utf-8")
    assert catalogue.diff(mutant, ROOT).count("\n+") >= 1


def test_a_patch_that_no_longer_matches_fails_loudly(tmp_path):
    project.copy_project(tmp_path)
    rotten = catalogue.Mutant(
        id="rotten",
        bug_class=1,
        title="t",
        source="s",
        killed_by=("uneven_split",),
        patch=(catalogue.Replacement(catalogue.TRAINER, "this text is not in the trainer\n", "x\n"),),
    )
    with pytest.raises(catalogue.PatchError, match="exactly once.*found it 0"):
        catalogue.apply(rotten, tmp_path)
    twice = catalogue.Mutant(
        id="twice",
        bug_class=1,
        title="t",
        source="s",
        killed_by=("uneven_split",),
        patch=(catalogue.Replacement(catalogue.TRAINER, "import", "import"),),
    )
    with pytest.raises(catalogue.PatchError, match=r"found it ([2-9]|\d\d+) time"):
        catalogue.apply(twice, tmp_path)
    broken = catalogue.Mutant(
        id="broken",
        bug_class=1,
        title="t",
        source="s",
        killed_by=("uneven_split",),
        patch=(catalogue.Replacement(catalogue.TRAINER, "def pooled_stats(", "def pooled_stats(("),),
    )
    with pytest.raises(catalogue.PatchError, match="does not compile"):
        catalogue.apply(broken, tmp_path)


def test_a_diff_is_read_hunk_by_hunk_into_replacements_with_their_context():
    text = (
        "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n"
        "@@ -1,4 +1,4 @@\n a = 1\n-b = 2\n+b = 3\n c = 4\n\n"  # an empty context line that lost its space
        "@@ -9,2 +9,3 @@\n x = 1\n+y = 2\n z = 3\n\\ No newline at end of file\n"
    )
    first, second = patches.read_diff(text)
    assert (first.file, first.before, first.old, first.new) == ("pkg/m.py", "a = 1\n", "b = 2\n", "b = 3\n")
    assert first.after == "c = 4\n\n"
    assert (second.before, second.old, second.new, second.after) == ("x = 1\n", "", "y = 2\n", "z = 3")
    source = "a = 1\nb = 2\nc = 4\n\nq\nq\nq\nq\nx = 1\nz = 3"
    patched = patches.apply_to_text(source, [first, second], "t")
    assert patched == "a = 1\nb = 3\nc = 4\n\nq\nq\nq\nq\nx = 1\ny = 2\nz = 3"
    with pytest.raises(patches.PatchError, match="out of order"):
        patches.apply_to_text(source, [second, first], "t")
    with pytest.raises(patches.PatchError, match="found it 2 time"):
        patches.apply_to_text("aaa", [patches.Replacement("f", "aa", "b")], "t")  # overlapping matches count
    for bad in ("--- a/x\n+++ b/y\n", "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n", "--- a/x\n+++ b/x\nstray\n"):
        with pytest.raises(patches.PatchError):
            patches.read_diff(bad)


def test_every_entry_is_a_toml_file_with_its_diff_and_the_loader_reports_what_is_wrong(tmp_path):
    assert list(catalogue.FOLDERS) == [ENTRIES.parent]  # the built-in algorithms share one catalogue folder
    tomls, diffs = sorted(ENTRIES.glob("*.toml")), sorted(ENTRIES.glob("*.diff"))
    assert len(catalogue.MUTANTS) == len(tomls) == len(diffs)  # every file read, none left over
    assert [m.id for m in catalogue.MUTANTS] == [p.stem for p in tomls] == [p.stem for p in diffs]
    for path in diffs:  # a real unified diff of a trainer file, paths relative to the repository root
        text = path.read_text(encoding="utf-8")
        files = re.findall(r"^\+\+\+ b/(\S+)$", text, flags=re.M)
        assert files and all((ROOT / f).is_file() for f in files) and text.startswith("--- a/")
    shutil.copy(tomls[0], tmp_path / "c01_renamed.toml")
    (tmp_path / "c02_orphan.diff").write_text("", encoding="utf-8")
    (tmp_path / "c03_bad.toml").write_text('id = "c03_bad"\nbug_class = "3"\nextra = 1\n', encoding="utf-8")
    entries, problems = load.read_entries(tmp_path)
    assert entries == []
    assert any("c01_renamed.toml: its id is" in p for p in problems)
    assert any("c01_renamed.toml: no c01_renamed.diff" in p for p in problems)
    assert any("c02_orphan.diff: no c02_orphan.toml" in p for p in problems)
    assert any("c03_bad.toml: unknown key 'extra'" in p for p in problems)
    assert any("c03_bad.toml: bug_class must be a int" in p for p in problems)
    assert any("c03_bad.toml: no killed_by" in p for p in problems)
    (tmp_path / "classes.toml").write_text(
        'classes = [{ number = 2, algorithm = "ppo", name = "b" }, { number = 1, algorithm = "dpo", name = "a" }]\n',
        encoding="utf-8",
    )
    classes, problems = load.read_classes(tmp_path / "classes.toml", ("ppo", "grpo"))
    assert [c.number for c in classes] == [2] and "class 1: a number, an algorithm" in problems[0]


def test_metadata_is_complete_for_every_ppo_and_grpo_class():
    assert catalogue.check_metadata() == []
    ppo = [m for m in catalogue.MUTANTS if m.algorithm == "ppo"]
    # a class may have several mutants (class 70: one per hyperparameter), and a reason stands for none
    classes = {m.bug_class for m in ppo} | {n.bug_class for n in catalogue.NOT_APPLICABLE}
    ppo_classes = [c.number for c in catalogue.CLASSES if c.algorithm == "ppo"]
    assert list(catalogue.CLASSES_OF["ppo"]) == ppo_classes and ppo_classes
    assert set(ppo_classes) <= classes, "a mutant (or a reason) for every PPO bug class"
    # a GRPO class that a PPO trainer has in its own form has a PPO mutant too, under the GRPO class's number (c87)
    assert classes - set(ppo_classes) <= set(catalogue.CLASSES_OF["grpo"])
    assert not {m.bug_class for m in ppo} & {n.bug_class for n in catalogue.NOT_APPLICABLE}
    grpo = [m for m in catalogue.MUTANTS if m.algorithm == "grpo"]
    grpo_classes = {c.number for c in catalogue.CLASSES if c.algorithm == "grpo"}
    assert set(catalogue.CLASSES_OF["grpo"]) == grpo_classes and grpo_classes
    assert grpo_classes <= {m.bug_class for m in grpo}, "a GRPO mutant per GRPO bug class"
    named = {catalogue.ALGORITHM_CHECKS["grpo"][c][0] for m in grpo for c in catalogue.named_checks(m)}
    scenarios = {scenario for scenario, _ in catalogue.ALGORITHM_CHECKS["grpo"].values()}
    assert named == scenarios, f"GRPO scenarios no mutant is killed by: {sorted(scenarios - named)}"
    for n in catalogue.NOT_APPLICABLE:
        assert n.reason.strip()
    for m in catalogue.MUTANTS:
        assert m.id and m.title and m.source and m.killed_by and m.patch
        assert re.fullmatch(r"[cg]\d\d_[a-z0-9_]+", m.id)
        assert int(m.id[1:3]) == m.bug_class and m.id[0] == {"ppo": "c", "grpo": "g"}[m.algorithm]
        if m.command == "verify":
            selection = catalogue.test_selection(m)
            assert selection and set(selection) <= set(catalogue.ALGORITHM_CHECKS[m.algorithm])
            command = harness_run.harness_command("verify", ROOT, selection, m.target)
            assert command[-len(selection) :] == [f"--check={check}" for check in selection]
            assert command[command.index("--target") + 1] == {"ppo": "reference", "grpo": "reference-grpo"}[m.algorithm]
        else:
            assert m.killed_by == (catalogue.VERIFY_DIST,)
    wrong = dataclasses.replace(catalogue.MUTANTS[0], id="c99_no_such_class", bug_class=99)
    assert any("bug class 99 is not in classes.toml" in p for p in catalogue._mutant_problems(wrong, {}))


def _ranges(numbers) -> str:
    """`1-15 and 20-47`: runs of consecutive numbers as the docs write them."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return " and ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def test_the_bug_catalogue_overview_is_the_classes_table():
    doc = (ROOT / "docs" / "bug-catalogue.md").read_text(encoding="utf-8")
    overview = doc.partition("\n## Overview\n")[2].partition("\n## ")[0]
    rows = [
        tuple(cell.strip() for cell in line.strip("|").split("|")[:3])
        for line in overview.splitlines()
        if re.match(r"\| \d+ \|", line)
    ]
    assert rows == [(str(c.number), c.algorithm.upper(), c.name) for c in catalogue.CLASSES]
    prose = " ".join(overview.split())
    assert f"Classes {_ranges(catalogue.CLASSES_OF['ppo'])} concern PPO" in prose
    assert f"Classes {_ranges(catalogue.CLASSES_OF['grpo'])} concern GRPO" in prose
    # a class's prefix once, however many GRPO mutants it has (g12: an empty micro-batch, an empty interval)
    ppo_form = list(dict.fromkeys(
        m.id[:3] for m in catalogue.MUTANTS if m.algorithm == "grpo" and m.bug_class in catalogue.CLASSES_OF["ppo"]
    ))  # fmt: skip
    assert f"number: {', '.join(ppo_form[:-1])} and {ppo_form[-1]}" in prose, "the GRPO mutants of PPO classes"


def test_each_mutant_is_judged_beside_the_control_of_its_command_and_algorithm():
    assert control_name("verify", "ppo") == "verify"
    assert control_name("verify-dist", "grpo") == "verify-dist-grpo"
    g09 = catalogue.by_id(["g09_mean_of_rank_means"])[0]
    command = harness_run.harness_command(g09.command, ROOT, (), g09.target)
    assert command[3:6] == ["verify-dist", "--target", "reference-grpo"]


def test_every_check_id_names_a_test_of_the_verify_suite():
    suite = (ROOT / "harness" / "suite" / "test_verify.py").read_text(encoding="utf-8")
    for check, (_, node) in catalogue.CHECKS.items():
        assert f"def {node.split('[')[0]}(" in suite, f"{check}: no {node} in the verify suite"


# ---------------------------------------------------------------- the runner's verdicts


def outcome(code, failed=(), passed=(), problem=""):
    checks = [{"id": c, "scenario": catalogue.CHECKS[c][0], "status": "fail"} for c in failed]
    checks += [{"id": c, "scenario": catalogue.CHECKS[c][0], "status": "pass"} for c in passed]
    return harness_run.RunOutcome(code, checks, 1.0, "", problem)


def test_verdicts_kill_only_on_exit_1_with_a_named_check():
    m = catalogue.by_id(["c02_unwritten_slots_averaged"])[0]
    assert verdicts.judge(m, outcome(1, failed=["lr0_ratio[epochs=1]"])).status is CuratedStatus.KILLED
    assert verdicts.judge(m, outcome(1, failed=["freshness"])).status is CuratedStatus.KILLED_BY_UNNAMED_CHECKS
    assert verdicts.judge(m, outcome(0, passed=["lr0_ratio[epochs=1]"])).status is CuratedStatus.SURVIVED
    assert verdicts.judge(m, outcome(2, failed=["lr0_ratio[epochs=1]"])).status is CuratedStatus.ERROR
    assert verdicts.judge(m, outcome(1)).status is CuratedStatus.ERROR
    assert verdicts.judge(m, outcome(None, problem="timed out")).status is CuratedStatus.ERROR
    c09 = catalogue.by_id(["c09_mean_of_rank_means"])[0]  # any check of the two-process run, but not its launch
    ranks = [{"id": "uneven_split[ranks=2]", "scenario": "uneven_split", "status": "fail"}]
    assert verdicts.judge(c09, harness_run.RunOutcome(1, ranks, 1.0, "")).status is CuratedStatus.KILLED
    launch = [{"id": verdicts.DIST_RUN, "scenario": "verify_dist", "status": "fail"}]
    assert verdicts.judge(c09, harness_run.RunOutcome(1, launch, 1.0, "")).status is CuratedStatus.ERROR
    padding = catalogue.by_id(["c13_padding_rows_in_objectives"])[0]  # named by scenario, reported by check id
    killed = verdicts.judge(padding, outcome(1, failed=["rollout_objectives[rollout=padding_rows]"]))
    assert killed.status is CuratedStatus.KILLED
    unnamed = verdicts.judge(padding, outcome(1, failed=["rollout_objectives[rollout=uneven_split]"]))
    assert unnamed.status is CuratedStatus.KILLED_BY_UNNAMED_CHECKS


def test_a_trainer_that_only_raised_is_no_kill_unless_its_bug_is_a_raise():
    """A diff that no longer fits the trainer makes it raise (a NameError, an AttributeError) in the checks that
    name it: that is an error of the catalogue, not a kill; a mutant whose bug the gate sees as a raise says so."""
    from harness.require import RAISED

    assert verdicts.RAISED == RAISED  # the words the runner reads are the words the check writes
    m = catalogue.by_id(["c02_unwritten_slots_averaged"])[0]
    raised = outcome(1, failed=["lr0_ratio[epochs=1]"])
    raised.checks[0]["message"] = f"{RAISED} (bs=4): NameError: name 'F' is not defined"
    judged = verdicts.judge(m, raised)
    assert judged.status is CuratedStatus.ERROR and "no longer expresses the bug" in judged.reason
    assert verdicts.judge(dataclasses.replace(m, raises=True), raised).status is CuratedStatus.KILLED
    both = outcome(1, failed=["lr0_ratio[epochs=1]", "lr0_ratio[epochs=2]"])
    both.checks[0]["message"] = f"{RAISED} (bs=4): ValueError"  # the other named check failed by its numbers
    assert verdicts.judge(m, both).status is CuratedStatus.KILLED


def test_a_verdict_names_the_failed_checks_and_says_why():
    m = catalogue.by_id(["c02_unwritten_slots_averaged"])[0]
    killed = verdicts.judge(m, outcome(1, failed=["lr0_ratio[epochs=1]", "freshness"], passed=["lr0_ratio[epochs=2]"]))
    assert killed == Judgement(CuratedStatus.KILLED, ("lr0_ratio[epochs=1]",), "")
    unnamed = verdicts.judge(m, outcome(1, failed=["freshness"]))
    assert unnamed == Judgement(CuratedStatus.KILLED_BY_UNNAMED_CHECKS, (), "failed: freshness; named: lr0_ratio")
    with pytest.raises(AttributeError):
        killed.status = CuratedStatus.SURVIVED  # a verdict is frozen


def test_curated_statuses_say_which_pass_and_how_mutation_json_shows_them():
    assert {s.text for s in CuratedStatus if s.passes} == {"killed", "not run"}
    assert {s.text: s.schema.value for s in CuratedStatus} == {
        "killed": "Killed",
        "killed by unnamed checks": "Killed",
        "survived": "Survived",
        "error": "RuntimeError",
        "not run": "Ignored",
    }
    assert all(CuratedStatus(s.text) is s for s in CuratedStatus)


# ---------------------------------------------------------------- the gate server (forked runs)

FAKE_GATE = """
import atexit, json, os, signal, sys, time

import own  # the run's own folder: first on sys.path, as PYTHONPATH puts a scratch copy
print("own", own.VALUE, "leak", getattr(json, "LEAK", None), "cwd", os.getcwd(), "path", os.environ["PYTHONPATH"])
print("stdin", repr(sys.stdin.read()), "argv", sys.argv[1:], flush=True)
json.LEAK = own.VALUE  # a preloaded module changed in this run must be unchanged in the next
atexit.register(lambda: print("exit handler ran", end=""))  # the child ends with os._exit: after these,
print("buffered", end=" ")  # and after what is still buffered (a file: nothing is flushed by a newline)
how = sys.argv[1]
if how == "sleep":
    time.sleep(600)
if how == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
if how == "raise":
    raise RuntimeError("the gate broke")
sys.exit(int(how))
"""


def fake_gate(root: Path, value: str) -> Path:
    """A folder with a `fakegate` package to run as `python -m fakegate HOW` and a module `own` of its own."""
    (root / "fakegate").mkdir(parents=True)
    (root / "fakegate" / "__init__.py").write_text("", encoding="utf-8")
    (root / "fakegate" / "__main__.py").write_text(FAKE_GATE, encoding="utf-8")
    (root / "own.py").write_text(f"VALUE = {value!r}\n", encoding="utf-8")
    return root


def test_forked_runs_are_fresh_runs_of_their_own_folder_and_keep_their_output(tmp_path):
    a, b = fake_gate(tmp_path / "a", "a"), fake_gate(tmp_path / "b", "b")
    with gate_client.GateServer(preload=("json",)) as server:
        assert server.started() == ""

        def run(root: Path, how: str, timeout: float = 60.0) -> tuple[int | None, str, str]:
            log = root / f"{how}.log"
            code, problem = server.run(root, [how], log, timeout, root / "imports.json", module="fakegate")
            return code, problem, log.read_text(encoding="utf-8")

        code, problem, log = run(a, "3")
        assert (code, problem) == (3, "")
        assert f"own a leak None cwd {a} path {a}" in log and "stdin '' argv ['3']" in log
        assert log.endswith("buffered exit handler ran"), log  # its exit handlers ran, its buffers were flushed
        assert run(b, "0")[:2] == (0, "") and "own b leak None" in run(b, "0")[2]  # nothing of a's run in b's
        assert json.loads((a / "imports.json").read_text(encoding="utf-8")) == {}  # it imported no trainer
        code, problem, log = run(a, "crash")
        assert (code, problem) == (-11, "") and "own a" in log  # killed by SIGSEGV, its output kept
        code, problem, log = run(a, "raise")
        assert code == 1 and "RuntimeError: the gate broke" in log
        assert log.startswith("own a") and "\nbuffered " in log  # stdout and stderr in one file, neither overwritten
        err = a / "raise.err"
        code, _ = server.run(a, ["raise"], a / "raise.out", 60.0, a / "imports.json", module="fakegate", stderr=err)
        out = (a / "raise.out").read_text(encoding="utf-8")
        assert code == 1 and out.startswith("own a") and "Traceback" not in out  # each stream to its own file
        assert "RuntimeError: the gate broke" in err.read_text(encoding="utf-8")
        code, problem, log = run(a, "sleep", timeout=1.0)
        assert (code, problem) == (None, "timed out after 1 s") and "own a" in log
        assert run(a, "0")[:2] == (0, "")  # the server outlives what its children did
    assert not server.base.exists()
    assert server.run(a, ["0"], a / "late.log", 60.0, a / "imports.json", module="fakegate")[0] is None


def test_a_run_is_answered_as_it_ends_not_at_the_servers_next_look(tmp_path):
    """The server looks at its children's deadlines every `poll` seconds; a child's end wakes it at once (SIGCHLD
    on its wake-up pipe). With a poll of 20 s, runs that end at once are answered at once, each of them (one
    after another, and two at a time), and what the runs themselves start and wait for is theirs as in a fresh
    process (the SIGCHLD handler and the pipe are not inherited)."""
    a = fake_gate(tmp_path / "a", "a")
    (a / "spawns.py").write_text(
        "import signal, subprocess, sys\n"
        "assert signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL and signal.set_wakeup_fd(-1) == -1\n"
        "sys.exit(subprocess.run([sys.executable, '-c', 'raise SystemExit(4)']).returncode)\n",
        encoding="utf-8",
    )
    with gate_client.GateServer(preload=("json",), poll=20.0) as server:
        assert server.started() == ""
        started = time.monotonic()
        for how in ("0", "3", "5"):
            code, problem = server.run(a, [how], a / "run.log", 600.0, a / "imports.json", module="fakegate")
            assert (code, problem) == (int(how), "")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            both = pool.map(lambda how: server.run(a, [how], a / f"{how}.log", 600.0, a / f"{how}.json",
                                                   module="fakegate"), ("6", "7"))  # fmt: skip
            assert list(both) == [(6, ""), (7, "")]
        code, problem = server.run(a, [], a / "spawns.log", 600.0, a / "imports.json", module="spawns")
        assert (code, problem) == (4, ""), (a / "spawns.log").read_text(encoding="utf-8")
        assert time.monotonic() - started < 10.0  # six runs: answered at the poll, they would take 20 s or more


def test_a_forked_run_imports_its_copys_trainer_first_where_asked_and_lists_it(tmp_path):
    """verify-dist's ranks are children of the forked run: it imports the copy's trainer modules before it forks
    them (they inherit those), and lists them; one that fails to import is left for the run to import and fail."""
    a = fake_gate(tmp_path / "a", "a")
    (a / "reference_trainers").mkdir()
    (a / "reference_trainers" / "__init__.py").write_text("", encoding="utf-8")
    (a / "reference_trainers" / "ppo.py").write_text("WHERE = 'a'\n", encoding="utf-8")
    (a / "reference_trainers" / "broken.py").write_text("raise ImportError('a patch broke it')\n", encoding="utf-8")
    modules = harness_run.trainer_modules(a)
    assert modules == ("reference_trainers", "reference_trainers.broken", "reference_trainers.ppo")
    with gate_client.GateServer(preload=("json",)) as server:
        code, problem = server.run(a, ["0"], a / "run.log", 60.0, a / "imports.json", module="fakegate",
                                   preimport=modules)  # fmt: skip
        assert (code, problem) == (0, ""), (a / "run.log").read_text(encoding="utf-8")
        imported = json.loads((a / "imports.json").read_text(encoding="utf-8"))
        assert imported == {
            "reference_trainers": str(a / "reference_trainers" / "__init__.py"),
            "reference_trainers.ppo": str(a / "reference_trainers" / "ppo.py"),
        }
        server.run(a, ["0"], a / "plain.log", 60.0, a / "imports.json", module="fakegate")
        assert json.loads((a / "imports.json").read_text(encoding="utf-8")) == {}  # nothing imported unasked


def test_the_gate_server_preloads_no_trainer_and_checks_where_each_run_got_it(tmp_path):
    preloaded = gate_client.preload_modules()
    assert {"harness.algorithms.ppo.scenarios.pooled", "harness.algorithms.grpo.scenarios.pooled"} <= set(preloaded)
    assert not {name.partition(".")[0] for name in preloaded} & set(gate_client.TRAINER_PACKAGES)
    with gate_client.GateServer(preload=("json", "reference_trainers")) as server:
        why = server.started()
    assert "preloading imported reference_trainers" in why and "each run must import its own" in why
    mine = str(tmp_path / "reference_trainers" / "ppo.py")
    assert harness_run.imported_elsewhere({"reference_trainers.ppo": mine, "harness": "/x/harness"}, tmp_path) == []
    other = str(ROOT / "reference_trainers" / "ppo.py")
    elsewhere = harness_run.imported_elsewhere({"reference_trainers.ppo": other}, tmp_path)
    assert elsewhere == [f"reference_trainers.ppo from {other}"]
    assert all(runner.patches_only_trainers(m) for m in catalogue.MUTANTS)
    harness_patch = dataclasses.replace(
        catalogue.MUTANTS[0], patch=(patches.Replacement("harness/oracle/numbers.py", "a", "b"),)
    )
    assert not runner.patches_only_trainers(harness_patch)  # runs in a fresh process: the server's harness is unpatched


# ---------------------------------------------------------------- mutmut plumbing


def test_every_pragma_of_the_mutated_files_spares_one_line_and_says_why():
    for path in [path for algo in mutmut_algorithms.ALGORITHMS.values() for path in algo.files]:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert mutmut_scratch.pragma_problems(source, path) == []
        assert "no mutate block" not in source
    problems = mutmut_scratch.pragma_problems(
        "x = 1  # pragma: no mutate\n# pragma: no mutate - alone\ny = 2  # pragma: no mutate block\n"
        "z = 3  # pragma: no mutate - a progress-bar label\n",
        "f.py",
    )
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3"]
    assert "no reason" in problems[0] and "alone" in problems[1] and "region" in problems[2]


def test_mutmut_config_and_scratch_layout(tmp_path):
    config = mutmut_algorithms.mutmut_config(ROOT / "pyproject.toml")
    assert sorted(config["only_mutate"]) == sorted(mutmut_run.MUTATED_FILES)
    assert config["process_isolation"] == "fork"
    scratch = mutmut_scratch.prepare_scratch(tmp_path / "scratch")
    hooks = Path(mutmut_hooks.__file__).read_text(encoding="utf-8")
    assert (scratch / f"{mutmut_algorithms.HOOKS_MODULE}.py").read_text(encoding="utf-8") == hooks
    for path in mutmut_run.MUTATED_FILES:
        original = (ROOT / path).read_text(encoding="utf-8")
        assert (scratch / mutmut_scratch.PRISTINE / path).read_text(encoding="utf-8") == original
        assert (scratch / path).read_text(encoding="utf-8") == original  # mutmut gets the file as it is
    with pytest.raises(RuntimeError, match="inside the project"):
        mutmut_scratch.prepare_scratch(ROOT / "mutants-scratch")


def test_generated_names_map_back_to_the_function_they_stand_for():
    sep = mutmut_collect.CLASS_SEPARATOR
    assert mutmut_collect.function_of("x_masked_mean__mutmut_3") == ("masked_mean", "x_masked_mean__mutmut_orig")
    assert mutmut_collect.function_of(f"x{sep}PPOTrainer{sep}rollout__mutmut_12") == (
        "PPOTrainer.rollout",
        f"x{sep}PPOTrainer{sep}rollout__mutmut_orig",
    )
    assert mutmut_hooks.original_name("x_masked_whiten__mutmut_orig") == "masked_whiten"
    assert mutmut_hooks.original_name(f"x{sep}PPOTrainer{sep}micro_step__mutmut_7") == "micro_step"
    assert mutmut_hooks.original_name("masked_whiten") is None


def test_generated_functions_get_their_original_code_names_back():
    """The harness names a spied call by its caller's code name: mutmut's copies must answer to the original's."""
    import types

    sep = mutmut_collect.CLASS_SEPARATOR
    module = types.ModuleType("fake_trainer")
    exec(
        "def x_masked_whiten__mutmut_orig(v):\n    def inner():\n        return v\n    return inner\n"
        f"class PPOTrainer:\n    def x{sep}PPOTrainer{sep}micro_step__mutmut_2(self):\n        return 1\n"
        "def masked_mean(v):\n    return v\n",
        vars(module),
    )
    assert mutmut_hooks.restore_code_names(module) == 2
    code = module.x_masked_whiten__mutmut_orig.__code__
    assert (code.co_name, code.co_qualname) == ("masked_whiten", "masked_whiten")
    assert module.x_masked_whiten__mutmut_orig(1).__code__.co_qualname == "masked_whiten.<locals>.inner"
    method = vars(module.PPOTrainer)[f"x{sep}PPOTrainer{sep}micro_step__mutmut_2"].__code__
    assert method.co_qualname == "PPOTrainer.micro_step"
    assert module.masked_mean.__code__.co_name == "masked_mean"


def test_mutants_of_methods_and_default_arguments_are_placed_in_the_original_file(tmp_path):
    """mutmut writes a method's mutants inside its class and mutates default arguments on the `def` line."""
    sep = mutmut_collect.CLASS_SEPARATOR
    path = "pkg/mod.py"
    pristine = "def f(a, b=True):\n    return a\n\n\nclass C:\n    def m(self, x):\n        return x + 1\n"
    generated = (
        "def x_f__mutmut_orig(a, b=True):\n    return a\n"
        "def x_f__mutmut_1(a, b=False):\n    return a\n"
        "class C:\n"
        f"    def x{sep}C{sep}m__mutmut_orig(self, x):\n        return x + 1\n"
        f"    def x{sep}C{sep}m__mutmut_1(self, x):\n        return x - 1\n"
    )
    (tmp_path / mutmut_scratch.PRISTINE / "pkg").mkdir(parents=True)
    (tmp_path / mutmut_scratch.PRISTINE / path).write_text(pristine, encoding="utf-8")
    (tmp_path / "mutants" / "pkg").mkdir(parents=True)
    (tmp_path / "mutants" / path).write_text(generated, encoding="utf-8")
    meta = {"exit_code_by_key": {"pkg.mod.x_f__mutmut_1": 0, f"pkg.mod.x{sep}C{sep}m__mutmut_1": 1}}
    (tmp_path / "mutants" / (path + ".meta")).write_text(json.dumps(meta), encoding="utf-8")
    by_function = {r.function: r for r in mutmut_collect.collect_file(tmp_path, path)}
    default, method = by_function["f"], by_function["C.m"]
    assert (default.original, default.replacement, default.location.start.line) == ("True", "False", 1)
    assert default.line == "def f(a, b=True):" and "+def f(a, b=False):" in default.diff
    assert (method.original, method.replacement, method.location.start.line) == ("+", "-", 7)
    assert method.file == path and method.status is MutantStatus.KILLED


def test_tests_run_cheapest_first_while_a_mutant_runs(tmp_path, monkeypatch):
    import json
    import types

    items = [types.SimpleNamespace(nodeid=n) for n in ("slow", "unknown", "fast", "middle")]
    (tmp_path / mutmut_hooks.STATS_FILE).write_text(
        json.dumps({"duration_by_test": {"slow": 5.0, "fast": 0.1, "middle": 1.0}}), encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    for under_test, expected in (("stats", ["slow", "unknown", "fast", "middle"]), ("m__mutmut_1", None)):
        monkeypatch.setenv("MUTANT_UNDER_TEST", under_test)
        got = list(items)
        mutmut_hooks.pytest_collection_modifyitems(None, None, got)
        assert [i.nodeid for i in got] == (expected or ["fast", "middle", "slow", "unknown"])


def test_the_hooks_plugin_imports_nothing_of_the_mutants_package():
    """mutmut_hooks.py is copied alone into the scratch project, where the `mutants` package does not exist; it runs
    inside mutmut's own pytest sessions, so mutmut (whose statistics the stats run extends) is importable there."""
    import ast

    tree = ast.parse(Path(mutmut_hooks.__file__).read_text(encoding="utf-8"))
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))
    stdlib = {"__future__", "difflib", "importlib", "inspect", "json", "os", "pathlib", "re", "sys", "types"}
    # harness: copied into the scratch project, its pytest plugin loaded by the same session (its CONFIG_ERROR key)
    assert {m.split(".")[0] for m in modules} <= stdlib | {"pytest", "hypothesis", "mutmut", "harness"}


def test_locations_are_those_of_the_original_file():
    original = ["    x = a * b\n", "    return x if n >= 2 else 0.0\n"]
    mutant = ["    x = a / b\n", "    return x if n >= 2 else 0.0\n"]
    where = locate.locate(original, mutant, first_line=10)
    assert where == locate.Change(Location(Position(10, 11), Position(10, 12)), "*", "/")
    assert where.location.to_dict() == {"start": {"line": 10, "column": 11}, "end": {"line": 10, "column": 12}}
    mutant = ["    x = a * b\n", "    return x if not n >= 2 else 0.0\n"]
    where = locate.locate(original, mutant, first_line=10)
    assert where.location.start.line == 11 and where.original == "n" and where.replacement == "not n"
    assert locate.locate(original, list(original), first_line=10) == locate.NO_CHANGE
    assert locate.mutator_name("==", "!=") == "EqualityOperator"
    assert locate.mutator_name('"a"', '"XXaXX"') == "StringLiteral"
    assert locate.mutator_name("x, ", "") == "ArgumentRemoval"


def record(name, status, original="0", replacement="1", line="if n > 0:", **changes) -> MutantRecord:
    """A mutmut record as mutmut_results.json holds it (fields in `changes` replaced), read back."""
    data = {
        "name": f"reference_trainers.ppo.{name}",
        "function": "pooled_stats",
        "status": status,
        "exit_code": 0,
        "seconds": 0.5,
        "location": {"start": {"line": 1, "column": 1}, "end": {"line": 1, "column": 2}},
        "line": line,
        "original": original,
        "replacement": replacement,
        "mutator": "NumberLiteral",
        "diff": "",
    }
    return MutantRecord.from_dict(dict(data, **changes))


def test_kill_cost_is_wall_time_over_the_first_test_mutmut_runs():
    stats = SuiteStats.from_dict(
        {
            "duration_by_test": {"t::slow": 2.0, "t::fast": 0.5, "t::zero": 0.0},
            "tests_by_function": {"pooled_stats": ["t::slow", "t::fast"], "masked_sum": ["t::zero"]},
        }
    )
    walls = [0.5, 1.0, 1.5, 2.0, 3.0]  # ratios 1, 2, 3, 4, 6 against t::fast, the test mutmut runs first
    records = [record(f"x_pooled_stats__mutmut_{i}", "killed", seconds=s) for i, s in enumerate(walls)]
    records += [
        record("x_pooled_stats__mutmut_9", "survived", seconds=9.0),
        record("x_masked_sum__mutmut_1", "killed", function="masked_sum", seconds=0.4),
    ]
    per_mutant, cost = scoring.kill_costs(records, stats)
    assert per_mutant["reference_trainers.ppo.x_pooled_stats__mutmut_1"].to_dict() == {
        "first_test": "t::fast",
        "first_test_seconds": 0.5,
        "cost_ratio": 2.0,
    }
    assert per_mutant["reference_trainers.ppo.x_masked_sum__mutmut_1"].cost_ratio is None  # a 0 s first test
    assert "reference_trainers.ppo.x_pooled_stats__mutmut_9" not in per_mutant
    assert (cost.killed, cost.measured, cost.first_tests) == (6, 5, {"t::fast": 5})
    assert cost.median_ratio == pytest.approx(3.0) and cost.p90_ratio == pytest.approx(5.2)
    assert cost.share_under_goal == pytest.approx(0.2) and cost.goal_met is False
    assert cost.mean_seconds == pytest.approx(8.4 / 6)
    text = markdown.cost_text(cost)
    assert "median **3.00x**" in text and "90th percentile **5.20x**" in text and "Goal NOT met" in text
    _, cost = scoring.kill_costs([dataclasses.replace(records[0], seconds=0.6)], stats)
    assert cost.goal_met is True and "Goal met" in markdown.cost_text(cost)


def test_timing_takes_the_kill_costs_the_driver_stored():
    stats = SuiteStats({"t::fast": 0.5, "t::slow": 2.0}, 3.0, {"pooled_stats": ["t::fast", "t::slow"]})
    records = (
        record("x_pooled_stats__mutmut_1", "killed"),
        record("x_pooled_stats__mutmut_2", "survived", seconds=2.5),
    )
    _, stored = scoring.kill_costs(records, stats)
    results = MutmutResults(0, 30.0, 2, ("pooled_stats",), catalogue.TRAINER, "", records, stats, stored, None)
    timing = scoring.timing(results)
    assert timing.kill_cost is stored
    assert (timing.seconds, timing.workers, timing.suite_seconds) == (30.0, 2, 2.5)
    assert (timing.mutants_per_minute, timing.mean_seconds_killed, timing.mean_seconds_survived) == (4.0, 0.5, 2.5)
    assert scoring.timing(dataclasses.replace(results, kill_cost=None)).kill_cost is None  # never recomputed


def test_every_survivor_must_be_triaged_and_equivalents_leave_the_score():
    records = [
        record("x_pooled_stats__mutmut_1", "killed", replacement="-1", column=8),
        record("x_pooled_stats__mutmut_2", "survived", replacement="1", column=8),
        record("x_pooled_stats__mutmut_3", "survived", original=">", replacement=">=", column=6),
        record("x_pooled_stats__mutmut_4", "survived", original="n", replacement="None", column=4),
    ]
    entries = [
        TriageEntry("pooled_stats", "if n > 0:", 8, "0", "1", TriageVerdict.EQUIVALENT, "w"),
        TriageEntry("pooled_stats", "if n > 0:", 8, "0", "2", TriageVerdict.MISSING_CHECK, "w"),
        TriageEntry("pooled_stats", "if n > 0:", None, ">", ">=", TriageVerdict.MISSING_CHECK, "old format"),
    ]
    triaged, problems, _ = scoring.triage(tuple(records), entries)
    assert any("untriaged survivor x_pooled_stats__mutmut_4" in p for p in problems)
    (stale,) = [p for p in problems if "stale" in p]  # said once, with what mutmut made at that line now
    assert "pooled_stats: `if n > 0:` at column 8: '0' -> '2' (missing-check) describes no mutant now" in stale
    assert "'0' -> '1' at column 8 [x_pooled_stats__mutmut_2, survived]" in stale
    assert [r.verdict for r in triaged] == [None, TriageVerdict.EQUIVALENT, TriageVerdict.MISSING_CHECK, None]
    assert records[1].verdict is None  # the records read in are left as they were
    summary = scoring.score(triaged)
    assert summary.counts == {"killed": 1, "equivalent": 1, "survived": 2}
    assert summary.score == pytest.approx(100 / 3, abs=0.01)


def test_the_triage_file_is_well_formed():
    entries, problems = scoring.load_triage()
    assert problems == []
    assert entries, "mutants/equivalent.toml lists the triaged survivors"
    assert all(isinstance(e, TriageEntry) and e.why.strip() for e in entries)
    assert all(TriageEntry.from_dict(e.to_dict()) == e for e in entries)
    assert all(e.column is not None and not e.name for e in entries), "keyed by description (triage refresh)"
    baseline = json.loads((ROOT / "mutants" / "baseline.json").read_text(encoding="utf-8"))
    assert 0 < baseline["mutmut"]["score"] <= 100


def test_the_triage_file_names_its_problems(tmp_path):
    path = tmp_path / "equivalent.toml"
    path.write_text(
        '[[mutant]]\nname = "m.x_a__mutmut_1"\nline = "l"\noriginal = "o"\nreplacement = "r"\nverdict = "maybe"\n'
        'why = "w"\n'
        '[[mutant]]\nfunction = "b"\nline = "l"\n'
        '[[mutant]]\nfunction = "c"\nline = "l"\noriginal = "o"\nreplacement = "r"\nverdict = "equivalent"\n'
        'why = " "\ncolumn = 1\n'
        '[[mutant]]\nfunction = "c"\nline = "l"\noriginal = "o"\nreplacement = "r"\nverdict = "equivalent"\n'
        'why = "w"\ncolumn = 1\n'
        '[[mutant]]\nline = "l"\noriginal = "o"\nreplacement = "r"\nverdict = "equivalent"\nwhy = "w"\n'
        '[[mutant]]\nfunction = "d"\nline = "l"\noriginal = "o"\nreplacement = "r"\nverdict = "equivalent"\n'
        'why = "w"\ncolumn = "0"\n',
        encoding="utf-8",
    )
    entries, problems = scoring.load_triage(path)
    assert [e.function for e in entries] == ["c", "c"] and entries[0].verdict is TriageVerdict.EQUIVALENT
    assert problems == [
        "equivalent.toml entry 1: verdict must be one of ('equivalent', 'missing-check'), not 'maybe'",
        "equivalent.toml entry 2: missing original, replacement, verdict, why",
        "equivalent.toml entry 3 (c): empty why",
        "equivalent.toml entry 4 triages the same mutant as entry 3: c: `l` at column 1: 'o' -> 'r' (equivalent)",
        "equivalent.toml entry 5: missing function",
        "equivalent.toml entry 6: column must be a whole number",
    ]


# ---------------------------------------------------------------- statuses


def test_every_mutmut_exit_code_maps_to_one_status_and_one_schema_status():
    codes = [code for status in MutantStatus for code in status.exit_codes]
    assert len(codes) == len(set(codes)), "an exit code is claimed by two statuses"
    for code in codes:
        status = MutantStatus.from_exit_code(code)
        assert code in status.exit_codes and isinstance(status.schema, SchemaStatus)
        assert MutantStatus(status.text) is status  # the word read back from mutmut_results.json
    assert MutantStatus.from_exit_code(None) is MutantStatus.NOT_CHECKED
    assert MutantStatus.from_exit_code(1) is MutantStatus.KILLED and MutantStatus.from_exit_code(0).undetected
    assert MutantStatus.from_exit_code(12345) is MutantStatus.SUSPICIOUS  # mutmut's default for an unknown code
    # REFUSED: an exit 2 the hooks plugin saw come from the harness's configuration error (not a mutmut code)
    detected = {MutantStatus.KILLED, MutantStatus.TIMEOUT, MutantStatus.REFUSED}
    assert {s for s in MutantStatus if s.detected} == detected
    unjudged = {MutantStatus.INTERRUPTED, MutantStatus.SUSPICIOUS, MutantStatus.SEGFAULT}  # counted apart, never lost
    assert {s for s in MutantStatus if s.unjudged} == unjudged
    assert not any(s.detected and s.undetected or s.unjudged and (s.detected or s.undetected) for s in MutantStatus)
    assert {s for s in MutantStatus if s.undetected} == {MutantStatus.SURVIVED, MutantStatus.NO_TESTS}
    assert {s.text: s.schema.value for s in MutantStatus} == {
        "killed": "Killed",
        "timeout": "Timeout",
        "survived": "Survived",
        "no tests": "NoCoverage",
        "skipped": "Ignored",
        "caught by type check": "CompileError",
        "suspicious": "RuntimeError",
        "segfault": "RuntimeError",
        "check was interrupted by user": "RuntimeError",
        "refused (configuration error)": "Killed",
        "not checked": "Pending",
    }
    assert schema.SCHEMA_STATUSES == {s.value for s in SchemaStatus} >= {s.schema.value for s in MutantStatus}


def test_the_exit_codes_are_those_of_the_installed_mutmut():
    stats = pytest.importorskip("mutmut.stats", reason="mutmut comes with the `mutation` extra")
    table = stats.status_by_exit_code
    for code, word in table.items():
        assert MutantStatus.from_exit_code(code).text == word, code
    assert {code for s in MutantStatus for code in s.exit_codes} == set(table)
    assert MutantStatus.from_exit_code(12345).text == table.default_factory()  # what an unknown code reads as


# ---------------------------------------------------------------- the records read back from the reports' inputs


def test_mutmut_results_json_reads_back_as_the_records_written(tmp_path):
    _, results = synthetic_inputs()
    killed = dataclasses.replace(results.mutants[0], cost=MutantCost("t::a", 0.25, 2.0), verdict=None, why="")
    stats = SuiteStats({"t::a": 0.25}, 1.5, {"pooled_stats": ["t::a"]})
    _, summary = scoring.kill_costs([killed], stats)
    untriaged = tuple(dataclasses.replace(r, verdict=None, why="") for r in results.mutants[1:])
    run = dataclasses.replace(results, mutants=(killed, *untriaged), tests=stats, kill_cost=summary, finished="t")
    data = json.loads(json.dumps(run.to_dict()))
    assert list(data) == [
        "mutmut_exit_code",
        "seconds",
        "max_children",
        "functions",
        "file",
        "source",
        "mutants",
        "tests",
        "kill_cost",
        "finished",
        "sources",
        "selected",
        "algorithm",
    ]
    assert list(data["mutants"][0])[-3:] == ["first_test", "first_test_seconds", "cost_ratio"]
    assert "first_test" not in data["mutants"][1] and "verdict" not in data["mutants"][1]
    assert data["tests"] == {
        "duration_by_test": {"t::a": 0.25},
        "stats_time": 1.5,
        "tests_by_function": {"pooled_stats": ["t::a"]},
    }
    assert MutmutResults.from_dict(data) == run
    assert MutmutResults.from_dict(dict(data, tests={})).tests is None
    assert dataclasses.replace(run, tests=None).to_dict()["tests"] == {}


def test_curated_json_reads_back_as_results_about_the_catalogue_mutants(tmp_path, capsys):
    m = catalogue.by_id(["c02_unwritten_slots_averaged"])[0]
    killed = CuratedResult(m, CuratedStatus.KILLED, ("lr0_ratio[epochs=1]",), ("lr0_ratio[epochs=1]",), "s", 2.5)
    broken = CuratedResult(catalogue.MUTANTS[0], CuratedStatus.ERROR, reason="exit code 2\nlog", diff="--- a\n")
    controls = {"verify": ControlResult(True, 3.0, 13), "verify-dist": ControlResult(False, 1.0, 0, "crash")}
    run = CuratedRun(controls, (killed, broken), False, 2, 9.0, "2026-01-01T00:00:00+0000")
    curated_output.write_curated_json(tmp_path, run)
    data = json.loads((tmp_path / "curated.json").read_text(encoding="utf-8"))
    assert list(data) == [
        "control",
        "controls",
        "full",
        "jobs",
        "wall_seconds",
        "finished",
        "mutants",
        "not_applicable",
    ]
    assert data["control"] == {"passed": True, "seconds": 3.0, "checks": 13, "reason": ""}
    assert data["mutants"][0] == {
        "id": m.id,
        "bug_class": 2,
        "title": m.title,
        "source": m.source,
        "killed_by": ["lr0_ratio"],
        "status": "killed",
        "failed_checks": ["lr0_ratio[epochs=1]"],
        "named_failed": ["lr0_ratio[epochs=1]"],
        "selection": "s",
        "seconds": 2.5,
        "reason": "",
        "diff": "",
        "command": "verify",
        "diagnosed_classes": [],
    }
    back = CuratedRun.from_dict(data)
    assert back == run and back.mutants[0].mutant == m  # the catalogue's mutant, patch included
    assert [r.passed for r in back.mutants] == [True, False]
    assert back.mutants[1].status_line == "error: exit code 2"
    gone = dict(data["mutants"][0], id="c99_gone", title="renamed since")
    lost = CuratedResult.from_dict(gone)
    assert (lost.id, lost.mutant.title, lost.mutant.patch) == ("c99_gone", "renamed since", ())
    assert CuratedRun.from_dict({"control": data["control"], "mutants": []}).controls == {"verify": controls["verify"]}
    curated_output.print_summary(list(run.mutants), controls, 2, 9.0)
    out = capsys.readouterr().out
    assert "c02_unwritten_slots_averaged  2      -          killed  lr0_ratio[epochs=1]" in out  # no diagnosis recorded
    assert "c01_mean_of_microbatch_means [error]: exit code 2" in out
    assert "`verify-dist` does not pass on the unmodified trainer" in out


# ---------------------------------------------------------------- the report (schema v2)


def synthetic_inputs():
    """A curated result and mutmut results shaped like the real ones, for the current trainer."""
    curated = {
        "control": {"passed": True, "seconds": 1.0, "checks": 11, "reason": ""},
        "full": False,
        "jobs": 1,
        "wall_seconds": 2.0,
        "mutants": [
            {
                "id": m.id,
                "bug_class": m.bug_class,
                "title": m.title,
                "source": m.source,
                "killed_by": list(m.killed_by),
                "status": "killed",
                "failed_checks": catalogue.named_checks(m)[:1],
                "named_failed": catalogue.named_checks(m)[:1],
                "selection": "",
                "seconds": 1.0,
                "reason": "",
                "diff": "",
                "command": m.command,
            }
            for m in catalogue.MUTANTS
            if m.command == "verify"
        ],
        "not_applicable": [],
    }
    curated = CuratedRun.from_dict(curated)
    line = next(i for i, text in enumerate(TRAINER_SOURCE.splitlines(), 1) if "if count > 0 else 0.0" in text)
    column = TRAINER_SOURCE.splitlines()[line - 1].index("0.0") + 1
    loc = {"start": {"line": line, "column": column}, "end": {"line": line, "column": column + 3}}
    mutmut = {
        "functions": ["pooled_stats"],
        "file": catalogue.TRAINER,
        "source": TRAINER_SOURCE,
        "seconds": 10.0,
        "max_children": 1,
        "mutmut_exit_code": 0,
        "mutants": [
            record("x_pooled_stats__mutmut_1", "killed", "0.0", "1.0", location=loc).to_dict(),
            record(
                "x_pooled_stats__mutmut_2", "survived", "0.0", "None", location=loc, verdict="missing-check", why="w"
            ).to_dict(),
            record(
                "x_pooled_stats__mutmut_3", "survived", "0.0", "2.0", location=loc, verdict="equivalent", why="w"
            ).to_dict(),
        ],
    }
    return curated, MutmutResults.from_dict(mutmut)


def test_report_json_is_schema_v2():
    curated, mutmut = synthetic_inputs()
    doc, unplaced = schema.schema_report(curated, mutmut, TRAINER_SOURCE, baseline=80.0)
    assert unplaced == []
    assert schema.validate(doc) == []
    doc = json.loads(json.dumps(doc))  # what is written is plain JSON
    assert doc["schemaVersion"] == "2"
    assert isinstance(doc["thresholds"]["high"], int) and isinstance(doc["thresholds"]["low"], int)
    entry = doc["files"][catalogue.TRAINER]
    assert entry["language"] == "python" and entry["source"] == TRAINER_SOURCE
    statuses = {"Killed", "Survived", "NoCoverage", "CompileError", "RuntimeError", "Timeout", "Ignored", "Pending"}
    ids = [m["id"] for m in entry["mutants"]]
    common = [r.id for r in curated.mutants if r.mutant.patch[0].file == COMMON]  # either algorithm's
    grpo = [r.id for r in curated.mutants if r.mutant.algorithm == "grpo" and r.id not in common]
    assert len(ids) == len(set(ids)) == 3 + len(curated.mutants) - len(grpo) - len(common)
    assert sorted(m["id"] for m in doc["files"][COMMON]["mutants"]) == sorted(common) and common
    grpo_entry = doc["files"][GRPO_TRAINER]  # the GRPO mutants patch the GRPO trainer
    assert sorted(m["id"] for m in grpo_entry["mutants"]) == sorted(grpo) and grpo
    tests = {t["id"] for t in doc["testFiles"]["harness/suite/test_verify.py"]["tests"]}
    assert all(k.startswith("grpo:") and k in tests for m in grpo_entry["mutants"] for k in m.get("killedBy", []))
    lines = TRAINER_SOURCE.split("\n")
    for m in entry["mutants"]:
        assert {"id", "mutatorName", "replacement", "location", "status"} <= set(m)
        assert m["status"] in statuses
        for end in ("start", "end"):
            assert 1 <= m["location"][end]["line"] <= len(lines) and m["location"][end]["column"] >= 1
        for test_id in m.get("killedBy", []):
            assert any(t["id"] == test_id for t in doc["testFiles"]["harness/suite/test_verify.py"]["tests"])
    by_id = {m["id"]: m for m in entry["mutants"]}
    assert by_id["x_pooled_stats__mutmut_3"]["status"] == "Ignored"
    assert by_id["x_pooled_stats__mutmut_2"]["status"] == "Survived"
    c15 = by_id["c15_global_accumulation_counter"]
    start = c15["location"]["start"]
    assert "self.optimizer.step()" in "\n".join(lines[start["line"] - 1 : c15["location"]["end"]["line"]])
    bad = json.loads(json.dumps(doc))
    del bad["files"][catalogue.TRAINER]["mutants"][0]["status"]
    bad["schemaVersion"] = "1"
    assert len(schema.validate(bad)) == 2


def test_each_mutated_file_gets_its_own_entry_in_mutation_json():
    curated, mutmut = synthetic_inputs()
    config_path = "reference_trainers/ppo_config.py"
    config_source = (ROOT / config_path).read_text(encoding="utf-8")
    loc = {"start": {"line": 14, "column": 8}, "end": {"line": 14, "column": 10}}
    in_config = record("x_exact_div__mutmut_1", "killed", "or", "and", location=loc, file=config_path)
    assert in_config.file == config_path and MutantRecord.from_dict(in_config.to_dict()) == in_config
    mutmut = dataclasses.replace(
        mutmut,
        mutants=(*mutmut.mutants, in_config),
        sources={catalogue.TRAINER: TRAINER_SOURCE, config_path: config_source},
    )
    doc, _ = schema.schema_report(curated, mutmut, TRAINER_SOURCE, baseline=None)
    assert schema.validate(doc) == []
    # grpo.py and common.py: curated mutants only (common.py's patch what both trainers share)
    assert set(doc["files"]) == {catalogue.TRAINER, config_path, GRPO_TRAINER, COMMON}
    assert [m["id"] for m in doc["files"][config_path]["mutants"]] == ["x_exact_div__mutmut_1"]
    assert "x_exact_div__mutmut_1" not in {m["id"] for m in doc["files"][catalogue.TRAINER]["mutants"]}


def test_html_without_the_component_says_so(tmp_path):
    curated, mutmut = synthetic_inputs()
    doc, _ = schema.schema_report(curated, mutmut, TRAINER_SOURCE, baseline=None)
    page = html_page.render(doc, None, "t")
    assert "was not available" in page and "<mutation-test-report-app" not in page
    page = html_page.render(doc, "console.log('</script>')", "t")
    assert page.count("</script>") == 3 and "<\\/script>" in page  # the inlined code cannot close its element


# ---------------------------------------------------------------- end to end (slow)


def test_the_two_curated_halves_run_the_whole_catalogue():
    """test_curated_ppo.py and test_curated_grpo.py run the mutants of one algorithm each: between them, every
    entry of the catalogue (tests/support/curated.py)."""
    ids = [m.id for m in catalogue.MUTANTS]
    assert len(ids) == len(set(ids)) == len(list(ENTRIES.glob("*.toml")))  # every entry of the catalogue
    halves = sorted(p.stem.removeprefix("test_curated_") for p in Path(__file__).parent.glob("test_curated_*.py"))
    assert sorted({m.algorithm for m in catalogue.MUTANTS}) == halves == ["grpo", "ppo"]


PROBE = """<script>
function collect(node, out) {
  if (node.shadowRoot) collect(node.shadowRoot, out);
  if (node.getAttribute) {
    const id = node.getAttribute('data-mutant-id');
    if (id) out.ids.push(id);
    const title = node.getAttribute('title');
    if (title) out.titles.push(title);
  }
  for (const child of node.childNodes) {
    if (child.nodeType === Node.TEXT_NODE) { const t = child.textContent.trim(); if (t) out.text.push(t); }
    else if (child.nodeType === Node.ELEMENT_NODE && child.tagName !== 'SCRIPT') collect(child, out);
  }
  return out;
}
setTimeout(() => {
  const app = document.querySelector('mutation-test-report-app');
  const out = collect(app, {ids: [], titles: [], text: [], shadow: !!app.shadowRoot});
  const pre = document.createElement('pre');
  pre.id = 'render-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 3000);
</script>
</body>"""


@pytest.fixture(scope="session")
def chromium() -> str:
    """A headless Chromium (installed with apt-get when missing and we may), or a skip that says why."""
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    found = next((shutil.which(n) for n in names if shutil.which(n)), None)
    if found is None and shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
            try:
                subprocess.run(cmd, env=env, capture_output=True, timeout=900, check=False)
            except (OSError, subprocess.TimeoutExpired):
                break
        found = next((shutil.which(n) for n in names if shutil.which(n)), None)
    if found is None:
        pytest.skip("no Chromium: not on PATH and `apt-get install -y chromium` was not possible here")
    return found


def render(chromium: str, page: Path, fragment: str, tmp_path: Path) -> dict:
    """Open `page` (with the probe appended) headless at `#fragment`; return what the component rendered."""
    probe = tmp_path / f"probe-{fragment.replace('/', '_') or 'overview'}.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE), encoding="utf-8")
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=15000",
            "--dump-dom",
            f"{probe.as_uri()}#{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = re.search(r'<pre id="render-probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"the page did not run its probe: {proc.stderr[-500:]}"
    return json.loads(html.unescape(found.group(1)))


def check_rendered(chromium: str, page: Path, doc: dict, tmp_path: Path) -> None:
    mutants = doc["files"][catalogue.TRAINER]["mutants"]
    overview = render(chromium, page, "", tmp_path)
    assert overview["shadow"], "mutation-test-report-app was never defined: the component did not load"
    assert Path(catalogue.TRAINER).name in overview["text"]
    assert GRPO_TRAINER not in doc["files"] or "grpo.py" in overview["text"]
    every = [m for entry in doc["files"].values() for m in entry["mutants"]]  # the overview counts every file
    detected = sum(m["status"] in ("Killed", "Timeout") for m in every)
    survived = sum(m["status"] == "Survived" for m in every)
    assert f"killed + timeout ({detected})" in overview["titles"]
    assert f"survived ({survived})" in overview["titles"]
    code = render(chromium, page, f"mutant/{Path(catalogue.TRAINER).name}", tmp_path)
    assert {m["id"] for m in mutants} <= set(code["ids"]), "every mutant is marked in the rendered source"
    assert "pooled_stats" in code["text"]
    tests = render(chromium, page, "test/test_verify.py", tmp_path)
    killers = {t for m in mutants for t in m.get("killedBy", [])}
    names = {t["id"]: t["name"] for t in doc["testFiles"]["harness/suite/test_verify.py"]["tests"]}
    for test_id in killers:
        assert names[test_id] in tests["text"]


@pytest.mark.slow
def test_mutation_html_renders_the_mutants_in_headless_chromium(chromium, tmp_path):
    js, origin = html_page.find_elements(install=True)
    if js is None:
        pytest.skip(f"the mutation-testing-elements component is not available: {origin}")
    curated, mutmut = synthetic_inputs()
    doc, _ = schema.schema_report(curated, mutmut, TRAINER_SOURCE, baseline=None)
    page = tmp_path / "mutation.html"
    page.write_text(html_page.render(doc, js, "test report"), encoding="utf-8")
    check_rendered(chromium, page, doc, tmp_path)


@pytest.mark.slow
def test_the_last_written_reports_mutation_html_renders(chromium, tmp_path):
    page, data = ROOT / "reports" / "mutation.html", ROOT / "reports" / "mutation.json"
    if not (page.is_file() and data.is_file()):
        pytest.skip("no reports/mutation.html yet: run `python -m mutants` (nox -s mutation) first")
    if "<mutation-test-report-app" not in page.read_text(encoding="utf-8"):
        pytest.skip("reports/mutation.html was written without the web component (mutation.md says why)")
    check_rendered(chromium, page, json.loads(data.read_text(encoding="utf-8")), tmp_path)


def test_mutation_md_shows_the_diagnosed_class_beside_the_true_one():
    from mutants.markdown import curated_section

    right = catalogue.by_id(["c01_mean_of_microbatch_means"])[0]
    wrong = catalogue.by_id(["c05_plain_mean_over_pads"])[0]
    combined = catalogue.by_id(["g51_logged_reward_unweighted"])[0]  # class 51; its nansum is class 50's too
    results = (
        CuratedResult(right, CuratedStatus.KILLED, ("x",), ("x",), "s", 1.0, diagnosed_classes=(1,)),
        CuratedResult(wrong, CuratedStatus.KILLED, ("x",), ("x",), "s", 1.0, diagnosed_classes=(2,)),
        CuratedResult(combined, CuratedStatus.KILLED, ("x",), ("x",), "s", 1.0, diagnosed_classes=(50, 51)),
    )
    run = CuratedRun({"verify": ControlResult(True, 1.0, 3)}, results, False, 1, 2.0, "2026-01-01T00:00:00+0000")
    text = "\n".join(curated_section(run))
    assert "| mutant | bug class | diagnosed |" in text
    assert "| `c01_mean_of_microbatch_means` | 1 | 1 |" in text and "| `c05_plain_mean_over_pads` | 5 | 2 |" in text
    assert "| `g51_logged_reward_unweighted` | 51 | 50+51 |" in text
    assert "names the mutant's own class for 2 of 3; misdiagnosed: `c05_plain_mean_over_pads` as class 2." in text


def test_a_curated_json_of_one_diagnosed_class_reads_back_as_its_list():
    """curated.json written before the classes were kept as a list holds one `diagnosed_class` (null for none)."""
    mutant = catalogue.by_id(["c05_plain_mean_over_pads"])[0]
    data = CuratedResult(mutant, CuratedStatus.KILLED, ("x",), ("x",), "s", 1.0, diagnosed_classes=(2,)).to_dict()
    assert data["diagnosed_classes"] == [2]
    assert CuratedResult.from_dict(data).diagnosed_classes == (2,)
    old = {k: v for k, v in data.items() if k != "diagnosed_classes"}
    assert CuratedResult.from_dict({**old, "diagnosed_class": 2}).misdiagnosed
    assert CuratedResult.from_dict({**old, "diagnosed_class": None}).diagnosed == "-"
