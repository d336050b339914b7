"""Each algorithm's curated mutants are where its registration says (`mutation.catalogue`, `mutation.id_prefix`).

The made-up third algorithm (tests/support/third_algorithm/) brings its own: one bug class and one mutant in its
own folder, found and validated by the catalogue through the registry, with nothing edited outside that folder and
its one entry-point line. The catalogue's own checks of what algorithms declare fail on a declaration that is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mutants import catalogue
from mutants.catalogue import load
from tests.support import forked

ROOT = Path(__file__).resolve().parents[2]
THIRD = ROOT / "tests" / "support" / "third_algorithm"
BUILT_IN = ROOT / "mutants" / "catalogue" / load.ENTRIES

PROBE = """
import json, sys
from pathlib import Path
from mutants import catalogue, controls, mutmut_algorithms

mine = [m for m in catalogue.MUTANTS if m.algorithm == "tokenmean"]
root = Path(sys.argv[1])
print(json.dumps({
    "problems": catalogue.check_metadata(),
    "ids": [m.id for m in catalogue.MUTANTS],
    "folders": {str(folder): list(names) for folder, names in catalogue.FOLDERS.items()},
    "classes": list(catalogue.CLASSES_OF["tokenmean"]),
    "mine": [[m.id, m.target, catalogue.named_checks(m)] for m in mine],
    "patched": [str(p.relative_to(root)) for m in mine for p in catalogue.apply(m, root)],
    "controls": sorted(name for name, (_, of) in controls.CONTROLS.items() if of == "tokenmean"),
    "mutmut": sorted(mutmut_algorithms.ALGORITHMS),
}))
"""


def env_with(*paths: Path) -> dict[str, str]:
    """This environment with `paths` first on PYTHONPATH (a folder with a `*.dist-info` registers its algorithm)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), os.environ.get("PYTHONPATH", "")]),
            "GITHUB_STEP_SUMMARY": "", "OMP_NUM_THREADS": "1"}  # fmt: skip


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The catalogue as a process with the third algorithm registered reads it; its mutant applied to a copy."""
    copy = tmp_path_factory.mktemp("third") / "root"
    shutil.copytree(THIRD, copy / THIRD.relative_to(ROOT), ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(copy)], capture_output=True, text=True, cwd=ROOT,
                          env=env_with(THIRD, ROOT), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), copy


@pytest.mark.slow
def test_a_third_algorithm_brings_its_own_mutants(registered):
    seen, _ = registered
    assert seen["problems"] == []  # its class has its mutant, its mutant's id, class and checks are valid
    assert seen["folders"] == {str(BUILT_IN.parent): ["ppo", "grpo"], str(THIRD / "mutants"): ["tokenmean"]}
    assert seen["ids"] == [*(m.id for m in catalogue.MUTANTS), "t901_last_count_only"]  # the built-in ones unchanged
    assert seen["classes"] == [901]
    assert seen["mine"] == [["t901_last_count_only", "tokenmean-reference", ["token_mean"]]]
    assert seen["patched"] == ["tests/support/third_algorithm/tokenmean/trainer.py"]
    assert seen["controls"] == ["verify-dist-tokenmean", "verify-tokenmean"] and "tokenmean" in seen["mutmut"]


@pytest.mark.slow
def test_its_mutant_fails_its_gate(registered, tmp_path):
    _, copy = registered
    proc = forked.run(
        [sys.executable, "-m", "harness", "verify", "--target", "tokenmean-reference", "--report-dir", str(tmp_path)],
        cwd=tmp_path, env=env_with(copy / THIRD.relative_to(ROOT), ROOT), timeout=300,
    )  # fmt: skip
    report = json.loads((tmp_path / "verify.json").read_text())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [(c["id"], c["status"]) for c in report["checks"]] == [("token_mean", "fail")]


def catalogue_with(monkeypatch, folders: dict[Path, tuple[str, ...]]) -> list[str]:
    """What `_read_catalogue` finds wrong with these catalogue folders."""
    monkeypatch.setattr(catalogue, "FOLDERS", folders)
    return catalogue._read_catalogue()[2]


def test_a_mutant_in_another_algorithms_folder_is_a_problem(monkeypatch, tmp_path):
    (tmp_path / load.ENTRIES).mkdir()
    first = sorted(BUILT_IN.glob("c*.toml"))[0]  # a mutant of the default algorithm
    for path in (first, first.with_suffix(".diff")):
        shutil.copy(path, tmp_path / load.ENTRIES / path.name)
    shutil.copy(BUILT_IN.parent / load.CLASSES, tmp_path / load.CLASSES)
    assert catalogue_with(monkeypatch, {tmp_path: ("ppo", "grpo")}) == []
    problems = catalogue_with(monkeypatch, {tmp_path: ("grpo",)})
    assert f"{first.stem}: its algorithm 'ppo' does not keep its mutants in {tmp_path}" in problems


def test_a_class_numbered_in_two_folders_is_a_problem(monkeypatch, tmp_path):
    for name in ("a", "b"):
        (tmp_path / name / load.ENTRIES).mkdir(parents=True)
        (tmp_path / name / load.CLASSES).write_text(f'classes = [{{ number = 1, algorithm = "{name}", name = "x" }}]\n')
    problems = catalogue_with(monkeypatch, {tmp_path / "a": ("a",), tmp_path / "b": ("b",)})
    assert problems == [f"{tmp_path / 'b' / load.CLASSES}: bug classes [1] are numbered in another catalogue folder"]


def test_an_id_prefix_two_algorithms_declare_is_a_problem(monkeypatch):
    assert catalogue._shared_prefixes() == []
    monkeypatch.setattr(catalogue, "ID_PREFIX", {**catalogue.ID_PREFIX, "tokenmean": catalogue.ID_PREFIX["ppo"]})
    assert catalogue._shared_prefixes() == ["algorithms ppo, tokenmean share the mutant id prefix 'c'"]


def test_a_mutants_id_begins_with_its_algorithms_prefix():
    first = catalogue.MUTANTS[0]
    assert catalogue._mutant_problems(first, {c.number: c for c in catalogue.CLASSES}) == []
    other = next(name for name, prefix in catalogue.ID_PREFIX.items() if prefix != catalogue.ID_PREFIX[first.algorithm])
    wrong = dataclasses.replace(first, algorithm=other)
    want = f"{first.id}: the id must be {catalogue.ID_PREFIX[other]}{first.bug_class:02d}_<words>"
    assert want in catalogue._mutant_problems(wrong, {c.number: c for c in catalogue.CLASSES})
