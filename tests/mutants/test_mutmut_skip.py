"""Mutants triaged (equivalent or missing-check) are skipped by the hooks plugin, but only when mutmut made that very
change; a skipped missing-check survivor still counts as undetected."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from mutants import mutmut_hooks, mutmut_scratch, scoring
from mutants.model import MutantRecord, TriageEntry, TriageVerdict

# what mutmut generates for a function `halve` of a module: the original body, and one mutant per change
GENERATED = """
def x_halve__mutmut_orig(x):
    y = x / 2
    return y


def x_halve__mutmut_1(x):
    y = x * 2
    return y


def x_halve__mutmut_2(x):
    y = x / 3
    return y


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
    entry = {"line": "y = x / 2", "original": "/", "replacement": "*", "verdict": "equivalent"}
    _skip_file(tmp_path, monkeypatch, {
        "ppo_generated_example.x_halve__mutmut_1": entry,
        # renumbered: the entry says `/` -> `*`, but mutant 2 makes 2 -> 3
        "ppo_generated_example.x_halve__mutmut_2": entry,
        "ppo_generated_example.xǁBoxǁget__mutmut_1": {"line": "return self.value + 0", "original": "+",
                                                      "replacement": "-", "verdict": "missing-check"},
    })  # fmt: skip
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_1") == "equivalent"
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_2") is None
    assert mutmut_hooks.triaged("ppo_generated_example.xǁBoxǁget__mutmut_1") == "missing-check"
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_9") is None  # not listed


def test_nothing_is_skipped_without_the_driver_s_file(generated, monkeypatch, tmp_path):
    monkeypatch.delenv(mutmut_hooks.SKIP_ENV, raising=False)
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_1") is None
    monkeypatch.setenv(mutmut_hooks.SKIP_ENV, str(tmp_path / "missing.json"))
    assert mutmut_hooks.triaged("ppo_generated_example.x_halve__mutmut_1") is None


def test_the_skip_file_lists_every_triaged_mutant_with_its_verdict(tmp_path):
    entries = {
        "a": TriageEntry("a", "y = x / 2", "/", "*", TriageVerdict.EQUIVALENT, "why"),
        "b": TriageEntry("b", "y = x / 2", "2", "3", TriageVerdict.MISSING_CHECK, "why"),
    }
    path = mutmut_scratch.write_skip_file(tmp_path, entries)
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "a": {"line": "y = x / 2", "original": "/", "replacement": "*", "verdict": "equivalent"},
        "b": {"line": "y = x / 2", "original": "2", "replacement": "3", "verdict": "missing-check"},
    }


def _record(name: str, status: str) -> MutantRecord:
    return MutantRecord.from_dict({
        "name": name, "function": "halve", "status": status, "exit_code": 34, "seconds": 0.1,
        "location": {"start": {"line": 2, "column": 11}, "end": {"line": 2, "column": 12}},
        "line": "y = x / 2", "original": "/", "replacement": "*", "mutator": "Operator", "diff": "",
    })  # fmt: skip


def test_a_skipped_mutant_takes_its_triage_and_one_without_is_a_problem():
    entry = TriageEntry("m.x_halve__mutmut_1", "y = x / 2", "/", "*", TriageVerdict.EQUIVALENT, "why")
    records = (_record("m.x_halve__mutmut_1", "skipped"), _record("m.x_halve__mutmut_3", "skipped"))
    triaged, problems, _ = scoring.triage(records, {entry.name: entry})
    assert triaged[0].outcome == "equivalent"
    assert problems and "untriaged survivor x_halve__mutmut_3" in problems[0]
    assert scoring.score(triaged[:1]).score is None  # an equivalent counts neither way


def test_a_skipped_missing_check_survivor_counts_as_undetected_not_as_nothing():
    survivor = TriageEntry("m.x_halve__mutmut_1", "y = x / 2", "/", "*", TriageVerdict.MISSING_CHECK, "why")
    records = (_record("m.x_halve__mutmut_1", "skipped"), _record("m.x_halve__mutmut_2", "killed"))
    triaged, problems, _ = scoring.triage(records, {survivor.name: survivor})
    assert problems == [] and triaged[0].outcome == "missing-check, not run"
    summary = scoring.score(triaged)
    assert (summary.detected, summary.undetected, summary.missing_check, summary.score) == (1, 1, 1, 50.0)
