"""Mutants triaged (equivalent or missing-check) are skipped by the hooks plugin, but only when mutmut made that very
change; a skipped missing-check survivor still counts as undetected."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys

import pytest

from mutants import mutmut_hooks, mutmut_scratch, scoring
from mutants.model import MutantRecord, TriageEntry, TriageVerdict

# what mutmut generates for a function `halve` of a module: the original body, and one mutant per change
GENERATED = """
def x_halve__mutmut_orig(x, k=2):
    y = x / 2
    z = y / 2
    z = y / 2
    return z


def x_halve__mutmut_1(x, k=2):
    y = x * 2
    z = y / 2
    z = y / 2
    return z


def x_halve__mutmut_2(x, k=2):
    y = x / 3
    z = y / 2
    z = y / 2
    return z


def x_halve__mutmut_3(x, k=2):
    y = x / 2
    z = y / 2
    z = y * 2
    return z


def x_halve__mutmut_4(x, k=3):
    y = x / 2
    z = y / 2
    z = y / 2
    return z


def x_halve__mutmut_5(x, k=2):
    y = x * 2
    z = y * 2
    z = y / 2
    return z


class Box:
    def xǁBoxǁget__mutmut_orig(self):
        return self.value + 0

    def xǁBoxǁget__mutmut_1(self):
        return self.value - 0
"""


@pytest.fixture
def generated(tmp_path, monkeypatch):
    """A module of generated functions, imported from a file (the plugin reads their source)."""
    (tmp_path / "ppo_generated_example.py").write_text(GENERATED, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("ppo_generated_example")
    yield module
    sys.modules.pop("ppo_generated_example", None)


def _skip_file(tmp_path, monkeypatch, entries: dict) -> None:
    path = tmp_path / "skip.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    monkeypatch.setenv(mutmut_hooks.SKIP_ENV, str(path))


def test_a_triaged_mutant_is_skipped_only_when_it_is_that_change(generated, tmp_path, monkeypatch):
    def entry(line, column, original, replacement, verdict="equivalent", occurrence=None):
        return {"line": line, "column": column, "occurrence": occurrence, "original": original,
                "replacement": replacement, "verdict": verdict}  # fmt: skip

    _skip_file(tmp_path, monkeypatch, {
        "halve": [
            entry("y = x / 2", 7, "/", "*"),
            entry("z = y / 2", 7, "/", "*", "missing-check", occurrence=2),
            entry("def halve(x, k=2):", 16, "2", "3"),
        ],
        "Box.get": [entry("return self.value + 0", 19, "+", "-", "missing-check")],
    })  # fmt: skip
    name = "ppo_generated_example.x_halve__mutmut_{}".format
    assert mutmut_hooks.triaged(name(1)) == "equivalent"
    assert mutmut_hooks.triaged(name(2)) is None  # 2 -> 3 on that line: another change
    assert mutmut_hooks.triaged(name(3)) == "missing-check"  # the second `z = y / 2`, as its occurrence says
    assert mutmut_hooks.triaged(name(4)) == "equivalent"  # a default argument, on the `def` line
    assert mutmut_hooks.triaged(name(5)) is None  # the triaged change and one more: not exactly that change
    assert mutmut_hooks.triaged("ppo_generated_example.xǁBoxǁget__mutmut_1") == "missing-check"
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_9") is None  # no such mutant


def test_an_entry_spares_no_mutant_at_another_place_than_its_own(generated, tmp_path, monkeypatch):
    name = "ppo_generated_example.x_halve__mutmut_3"  # `/` -> `*` in the second `z = y / 2`
    for wrong in (
        {"occurrence": 1, "column": 7},  # the first of the two lines
        {"occurrence": None, "column": 7},  # the line appears twice: an entry must say which
        {"occurrence": 2, "column": 5},  # another column
        {"occurrence": 3, "column": 7},  # no third such line
    ):
        _skip_file(tmp_path, monkeypatch, {"halve": [
            {"line": "z = y / 2", "original": "/", "replacement": "*", "verdict": "equivalent", **wrong},
        ]})  # fmt: skip
        assert mutmut_hooks.triaged(name) is None, wrong
    # the old format (no column) spares a mutant only where the original occurs once in the line
    _skip_file(tmp_path, monkeypatch, {"halve": [
        {"line": "z = y / 2", "occurrence": 2, "original": "/", "replacement": "*", "verdict": "equivalent"},
    ]})  # fmt: skip
    assert mutmut_hooks.triaged(name) == "equivalent"


def test_nothing_is_skipped_without_the_driver_s_file(generated, monkeypatch, tmp_path):
    monkeypatch.delenv(mutmut_hooks.SKIP_ENV, raising=False)
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_1") is None
    monkeypatch.setenv(mutmut_hooks.SKIP_ENV, str(tmp_path / "missing.json"))
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_1") is None


def test_the_skip_file_lists_every_triaged_mutant_with_its_verdict(tmp_path):
    entries = [
        TriageEntry("halve", "y = x / 2", 7, "/", "*", TriageVerdict.EQUIVALENT, "why"),
        TriageEntry("halve", "y = x / 2", 9, "2", "3", TriageVerdict.MISSING_CHECK, "why", name="m.x_halve__mutmut_2"),
    ]
    path = mutmut_scratch.write_skip_file(tmp_path, entries)
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "halve": [
            {"line": "y = x / 2", "column": 7, "occurrence": None, "original": "/", "replacement": "*",
             "verdict": "equivalent"},
            {"line": "y = x / 2", "column": 9, "occurrence": None, "original": "2", "replacement": "3",
             "verdict": "missing-check"},
        ]
    }  # fmt: skip


def _record(name: str, status: str) -> MutantRecord:
    return MutantRecord.from_dict({
        "name": name, "function": "halve", "status": status, "exit_code": 34, "seconds": 0.1,
        "location": {"start": {"line": 2, "column": 11}, "end": {"line": 2, "column": 12}},
        "line": "y = x / 2", "original": "/", "replacement": "*", "mutator": "Operator", "diff": "", "column": 7,
    })  # fmt: skip


def test_a_skipped_mutant_takes_its_triage_and_one_without_is_a_problem():
    entry = TriageEntry("halve", "y = x / 2", 7, "/", "*", TriageVerdict.EQUIVALENT, "why")
    records = (
        _record("m.x_halve__mutmut_1", "skipped"),
        dataclasses.replace(_record("m.x_halve__mutmut_3", "skipped"), replacement="//"),
    )
    triaged, problems, _ = scoring.triage(records, [entry])
    assert triaged[0].outcome == "equivalent"
    assert problems and "untriaged survivor x_halve__mutmut_3" in problems[0]
    assert scoring.score(triaged[:1]).score is None  # an equivalent counts neither way


def test_a_skipped_missing_check_survivor_counts_as_undetected_not_as_nothing():
    survivor = TriageEntry("halve", "y = x / 2", 7, "/", "*", TriageVerdict.MISSING_CHECK, "why")
    records = (
        _record("m.x_halve__mutmut_1", "skipped"),
        dataclasses.replace(_record("m.x_halve__mutmut_2", "killed"), replacement="//"),
    )
    triaged, problems, _ = scoring.triage(records, [survivor])
    assert problems == [] and triaged[0].outcome == "missing-check, not run"
    summary = scoring.score(triaged)
    assert (summary.detected, summary.undetected, summary.missing_check, summary.score) == (1, 1, 1, 50.0)
