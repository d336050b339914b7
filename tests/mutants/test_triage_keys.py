"""The triage is keyed by what a mutant is (function, line text, column, occurrence, original, replacement), never by
mutmut's number for it: a line added to a trainer function renumbers its mutants and leaves the triage matching every
mutant it matched before; and `python -m mutants triage` lists, adds and refreshes entries."""

from __future__ import annotations

import ast
import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

from mutants import __main__ as cli
from mutants import keys, mutmut_hooks, scoring, triage
from mutants.model import MutantRecord, MutmutResults, TriageEntry, TriageVerdict
from mutants.mutmut_collect import collect_file
from mutants.mutmut_scratch import PRISTINE
from mutants.project import ROOT

PATH = "reference_trainers/ppo.py"
FUNCTION = "PPOTrainer.__init__"  # the function of the issue: one line added at its top renumbered its mutants


def method_source(path: str, function: str) -> str:
    """`Class.method` of the project's `path` alone in its class: a module mutmut mutates in seconds."""
    source = (ROOT / path).read_text(encoding="utf-8")
    cls, _, method = function.partition(".")
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    lines = source.splitlines(keepends=True)[item.lineno - 1 : item.end_lineno]
                    return f"class {cls}:\n" + "".join(lines)
    raise AssertionError(f"no {function} in {path}")


def add_first_line(source: str, function: str, line: str) -> str:
    """`source` with `line` added as the first statement of `function` (after its docstring, if any)."""
    cls, _, method = function.partition(".")
    tree = ast.parse(source)
    node = next(i for c in tree.body if c.name == cls for i in c.body if getattr(i, "name", "") == method)
    first = node.body[0]
    has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    after = first.end_lineno if has_doc else first.lineno - 1
    indent = " " * node.body[-1].col_offset
    lines = source.splitlines(keepends=True)
    return "".join(lines[:after] + [indent + line + "\n"] + lines[after:])


def mutmut_records(tmp_path: Path, source: str) -> tuple[list[MutantRecord], dict[str, str]]:
    """Every mutant mutmut 3 generates for `source` (as `PATH`), as the driver's records (all survivors), with
    their triage keys; and the generated functions' code, by mutmut's name, as the hooks plugin reads them."""
    file_mutation = pytest.importorskip("mutmut.mutation.file_mutation", reason="mutmut comes with `mutation`")
    mutated = file_mutation.mutate_file_contents(PATH, source)
    module = PATH.removesuffix(".py").replace("/", ".")
    (tmp_path / "mutants" / PATH).parent.mkdir(parents=True)
    (tmp_path / PRISTINE / PATH).parent.mkdir(parents=True)
    (tmp_path / "mutants" / PATH).write_text(mutated.code, encoding="utf-8")
    (tmp_path / PRISTINE / PATH).write_text(source, encoding="utf-8")
    meta = {"exit_code_by_key": {f"{module}.{name}": 0 for name in mutated.mutant_names}}
    (tmp_path / "mutants" / (PATH + ".meta")).write_text(json.dumps(meta), encoding="utf-8")
    records = list(keys.describe(collect_file(tmp_path, PATH), {PATH: source}))
    return records, mutated.code


def generated_lines(code: str, name: str) -> tuple[list[str], list[str]]:
    """(the mutant's lines, its original's), from its `def` line on, named as the plugin names them."""
    generated = name.rpartition(".")[2]
    orig = generated.rpartition("__mutmut_")[0] + "__mutmut_orig"
    short = keys_function(generated).rpartition(".")[2]
    found = {}
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.FunctionDef) and node.name in (generated, orig):
            lines = code.splitlines()[node.lineno - 1 : node.end_lineno]
            found[node.name] = [lines[0].replace(f"def {node.name}(", f"def {short}(", 1), *lines[1:]]
    return found[generated], found[orig]


def keys_function(generated: str) -> str:
    return mutmut_hooks.function_of(generated)


def description(r: MutantRecord) -> tuple:
    return (r.function, r.line, r.column, r.occurrence, r.original, r.replacement)


def test_a_line_added_at_the_top_of_a_trainer_function_leaves_the_triage_matching(tmp_path):
    before_source = method_source(PATH, FUNCTION)
    after_source = add_first_line(before_source, FUNCTION, "self.triage_probe = 0")
    before, _ = mutmut_records(tmp_path / "before", before_source)
    after, after_code = mutmut_records(tmp_path / "after", after_source)
    assert len(after) > len(before)  # the new line has mutants of its own, made first
    renumbered = {description(r): r.name for r in after}
    assert sum(renumbered.get(description(r)) != r.name for r in before) > len(before) // 2  # mutmut renumbered
    assert all(r.column is not None for r in before + after)

    # the project's triage of that function, and one entry per mutant it had before the line was added
    entries, problems = scoring.load_triage()
    assert problems == []
    ours = [e for e in entries if e.function == FUNCTION]
    assert ours, f"equivalent.toml triages mutants of {FUNCTION}"
    every = [
        TriageEntry(r.function, r.line, r.column, r.original, r.replacement, TriageVerdict.EQUIVALENT, "w", occurrence)
        for r in before
        for occurrence in [r.occurrence]
    ]
    for entry in ours + every:
        matched_before = [description(r) for r in before if entry.matches(r)]
        matched_after = [description(r) for r in after if entry.matches(r)]
        assert matched_before, f"the triage is up to date: {entry.describe()}"
        assert matched_after == matched_before, entry.describe()

    # the report: no stale entry, every mutant of before still triaged, only the new line's mutants untriaged
    triaged, problems, _ = scoring.triage(tuple(after), every)
    untriaged = [r for r in triaged if r.verdict is None]
    assert all(r.line == "self.triage_probe = 0" for r in untriaged) and untriaged
    assert all("untriaged survivor" in p and "self.triage_probe" in p for p in problems)

    # the hooks plugin skips exactly the mutants an entry describes, under their new numbers
    skip = [dataclasses.asdict(e) | {"verdict": e.verdict.value} for e in ours]
    for r in after:
        mutant_lines, orig_lines = generated_lines(after_code, r.name)
        spared = any(mutmut_hooks.is_that_change(mutant_lines, orig_lines, entry) for entry in skip)
        assert spared == any(e.matches(r) for e in ours), r.name


# ---------------------------------------------------------------- the triage command

SOURCE = textwrap.dedent(
    """\
    def f(x):
        y = x * 2 * 2
        y = x * 2 * 2
        return y
    """
)


def rec(n: int, status: str, line: int, column: int, original: str, replacement: str) -> MutantRecord:
    """A record of `f` in SOURCE, the change at 1-based (line, column) of the file."""
    text = SOURCE.splitlines()[line - 1]
    return MutantRecord.from_dict(
        {
            "name": f"reference_trainers.ppo.x_f__mutmut_{n}",
            "function": "f",
            "status": status,
            "exit_code": 0,
            "seconds": 0.1,
            "location": {"start": {"line": line, "column": column}, "end": {"line": line, "column": column + 1}},
            "line": text.strip(),
            "original": original,
            "replacement": replacement,
            "mutator": "m",
            "diff": "",
            "file": PATH,
        }
    )


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """Results of a run over SOURCE and an empty triage file, where the triage command looks for them."""
    records = (
        rec(1, "survived", 2, 11, "*", "/"),  # the first `*` of the first line
        rec(2, "killed", 2, 15, "*", "/"),
        rec(3, "survived", 3, 11, "*", "/"),  # the same change in the second, identical line
        rec(4, "killed", 4, 12, "y", "None"),
    )
    results = MutmutResults(0, 1.0, 1, ("f",), PATH, SOURCE, records, sources={PATH: SOURCE})
    path = tmp_path / "mutmut_results.json"
    path.write_text(json.dumps(results.to_dict()), encoding="utf-8")
    (tmp_path / "triage").mkdir()
    monkeypatch.setattr(triage, "HERE", tmp_path / "triage")
    triage_file = tmp_path / "triage" / "equivalent.toml"
    triage_file.write_text("# header\n", encoding="utf-8")
    return path, triage_file


def test_the_records_carry_their_column_and_the_occurrence_of_a_repeated_line():
    records = keys.describe((rec(1, "survived", 2, 11, "*", "/"), rec(4, "killed", 4, 12, "y", "None")), {PATH: SOURCE})
    assert [(r.column, r.occurrence) for r in records] == [(7, 1), (8, None)]


def test_triage_lists_adds_and_is_clean_once_every_survivor_is_triaged(setup, capsys):
    results, triage_file = setup
    assert cli.main(["triage", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert "untriaged survivor x_f__mutmut_1" in out and "untriaged survivor x_f__mutmut_3" in out
    args = ["triage", "--results", str(results), "add", "x_f__mutmut_1", "x_f__mutmut_3"]
    assert cli.main([*args, "--verdict", "missing-check", "--why", "a check of f's doubling"]) == 0
    text = triage_file.read_text(encoding="utf-8")
    assert text.startswith("# header\n\n[[mutant]]") and "__mutmut_" not in text  # keyed by description
    assert text.count("\n\n[[mutant]]") == 2  # a blank line before each entry
    entries, problems = scoring.load_triage(triage_file)
    assert problems == [] and [(e.line, e.column, e.occurrence) for e in entries] == [
        ("y = x * 2 * 2", 7, 1),
        ("y = x * 2 * 2", 7, 2),
    ]
    assert cli.main(["triage", "--results", str(results)]) == 0
    assert cli.main([*args[:4], "x_f__mutmut_1", "--verdict", "equivalent", "--why", "w"]) == 2  # already triaged
    assert cli.main([*args[:4], "x_f__mutmut_2", "--verdict", "equivalent", "--why", "w"]) == 2  # killed
    assert cli.main([*args[:4], "x_f__mutmut_9", "--verdict", "equivalent", "--why", "w"]) == 2  # no such mutant
    assert cli.main([*args[:4], "x_f__mutmut_1", "--verdict", "maybe", "--why", "w"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)  # one line each


def test_a_stale_entry_is_reported_once_with_what_mutmut_made_there_now(setup, capsys):
    results, triage_file = setup
    stale = TriageEntry("f", "y = x * 2 * 2", 11, "*", "-", TriageVerdict.EQUIVALENT, "w", 1)
    triage_file.write_text(triage.format_entry(stale), encoding="utf-8")
    assert cli.main(["triage", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    (line,) = [p for p in out.splitlines() if "stale" in p]
    assert "f: `y = x * 2 * 2` (occurrence 1) at column 11: '*' -> '-' (equivalent) describes no mutant now" in line
    assert "'*' -> '/' at column 7 (occurrence 1) [x_f__mutmut_1, survived]" in line
    assert cli.main(["triage", "--results", str(results), "refresh"]) == 1  # refresh keeps it, and says so
    assert cli.main(["triage", "--results", str(results), "refresh", "--drop-stale"]) == 0
    assert scoring.load_triage(triage_file) == ([], [])


def test_refresh_rewrites_old_entries_keyed_by_description_and_keeps_the_comments(setup, capsys):
    results, triage_file = setup
    triage_file.write_text(
        "# header\n\n# ---- f: the doubling\n\n"
        '[[mutant]]\nname = "reference_trainers.ppo.x_f__mutmut_3"\nline = \'y = x * 2 * 2\'\n'
        "original = '*'\nreplacement = '/'\nverdict = \"equivalent\"\nwhy = '''two\nlines'''\n\n# ---- the end\n",
        encoding="utf-8",
    )
    (old,), _ = scoring.load_triage(triage_file)
    assert old.function == "f" and old.column is None
    assert cli.main(["triage", "--results", str(results)]) == 1  # `*` twice in a line that is there twice: stale
    assert cli.main(["triage", "--results", str(results), "refresh"]) == 0  # its old name settles which it was
    text = triage_file.read_text(encoding="utf-8")
    assert text.startswith("# header\n\n# ---- f: the doubling\n\n[[mutant]]\n") and text.endswith("# ---- the end\n")
    (new,), problems = scoring.load_triage(triage_file)
    assert problems == [] and (new.column, new.occurrence, new.name, new.why) == (7, 2, "", "two\nlines")
    capsys.readouterr()
    assert cli.main(["triage", "--results", str(results)]) == 1
    (problem,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("PROBLEM")]
    assert "untriaged survivor x_f__mutmut_1 " in problem  # the other one, never triaged


@pytest.mark.parametrize("text", ["plain", "it's", "a\nb", "ends'", "'''x'''\n", "\\d+", "tab\there", "\x7f", "\nlead"])
def test_the_entry_writer_round_trips_any_text(text, tmp_path):
    entry = TriageEntry("f", text, 1, text, text, TriageVerdict.MISSING_CHECK, text or "w", 2)
    (tmp_path / "t.toml").write_text(triage.format_entry(entry), encoding="utf-8")
    (read,), problems = scoring.load_triage(tmp_path / "t.toml")
    assert problems == [] and read == entry


@pytest.mark.parametrize("text", ['{"schema_version": 2, "files": {}}', "not json", "[1, 2]"])
def test_a_results_file_that_is_no_mutmut_run_is_a_one_line_usage_error(text, tmp_path, capsys):
    wrong = tmp_path / "mutation.json"  # the report, passed where the run's results belong
    wrong.write_text(text, encoding="utf-8")
    assert cli.main(["triage", "--results", str(wrong), "list"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {wrong} is not a mutmut run's results") and "mutmut_results.json" in line
