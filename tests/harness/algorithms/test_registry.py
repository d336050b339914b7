"""The algorithm registry: what an algorithm declares, how it is found, and that the core names no metric of one."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from harness import algorithms
from harness.algorithms import DEFAULT_ALGORITHM, MEMBERS, Mutation, case, found, get, known_algorithms
from harness.errors import HarnessConfigError
from harness.tolerances import ToleranceTable, tolerance

ROOT = Path(__file__).resolve().parents[3]
BUILT_IN = {
    name: path.partition(":")[0].split(".")[2]
    for name, path in found().items()
    if path.startswith("harness.algorithms.")
}  # fmt: skip
"""Each registered algorithm whose package is a folder of harness/algorithms/ -> that folder's name."""


def test_every_built_in_algorithm_is_registered_and_declares_every_member():
    folders = {path.parent.name for path in (ROOT / "harness" / "algorithms").glob("*/algorithm.py")}
    assert len(folders) >= 2 and set(BUILT_IN.values()) == folders  # every algorithm folder is registered
    assert known_algorithms()[0] == DEFAULT_ALGORITHM
    for name in BUILT_IN:
        algorithm = get(name)
        assert all(member in dir(algorithm) for member in MEMBERS)
        assert algorithm.default_target in algorithm.targets
        assert algorithm.scenarios and algorithm.mutation.files[0].startswith("reference_trainers/")


def test_an_unknown_or_incomplete_algorithm_is_a_configuration_error(monkeypatch):
    with pytest.raises(HarnessConfigError, match=f"unknown algorithm 'rloo'; known: {', '.join(known_algorithms())}$"):
        get("rloo")
    monkeypatch.setattr(algorithms, "found", lambda: {"half": "harness.errors:HarnessConfigError"})
    get.cache_clear()
    try:
        with pytest.raises(HarnessConfigError, match="does not declare name, default_target"):
            get("half")
    finally:
        get.cache_clear()


@dataclasses.dataclass(frozen=True)
class HalfMutation:
    """A `mutation` declared before an algorithm's curated mutants were: no id prefix, no catalogue folder."""

    files: tuple[str, ...] = ("reference_trainers/ppo.py",)
    triage_file: str = "equivalent.toml"
    baseline_section: str | None = None
    unit_tests: tuple[str, ...] = ()
    rank_functions: tuple[str, ...] = ()


@pytest.mark.parametrize(
    "mutation, why",
    [
        (HalfMutation(), "does not declare id_prefix, catalogue"),
        (Mutation(("reference_trainers/ppo.py",), "equivalent.toml", None, id_prefix="C1", catalogue=""),
         "id_prefix must be lowercase letters, not 'C1'; names no catalogue folder"),
        (Mutation((), "equivalent.toml", None, id_prefix="h", catalogue="mutants/catalogue"), "names no mutated file"),
    ],
)  # fmt: skip
def test_an_algorithm_whose_mutation_is_incomplete_is_refused_in_one_line(monkeypatch, mutation, why):
    half = dataclasses.replace(get(DEFAULT_ALGORITHM), name="half", mutation=mutation)
    monkeypatch.setattr(sys.modules[__name__], "HALF", half, raising=False)
    monkeypatch.setattr(algorithms, "found", lambda: {"half": f"{__name__}:HALF"})
    get.cache_clear()
    try:
        with pytest.raises(HarnessConfigError) as refused:
            get("half")
    finally:
        get.cache_clear()
    assert str(refused.value) == f"algorithm 'half' ({__name__}:HALF): its mutation {why}"


def test_case_finds_the_algorithm_from_the_id():
    assert case("short_window").scenario.check.__module__.startswith("harness.algorithms.grpo")
    assert case("uneven_split[epochs=1]").scenario.check.__module__.startswith("harness.algorithms.ppo")
    # an id both algorithms have: the default algorithm's, unless one is named
    assert case("freshness").scenario.check.__module__.startswith("harness.algorithms.ppo")
    assert case("freshness", "grpo").scenario.check.__module__.startswith("harness.algorithms.grpo")
    with pytest.raises(KeyError, match="no check 'short_window' in ppo"):
        case("short_window", "ppo")


def test_each_algorithms_tolerance_rows_are_read_through_the_core():
    ppo, grpo = ToleranceTable.of("ppo", get("ppo").tolerances), ToleranceTable.of("grpo", get("grpo").tolerances)
    assert tolerance("loss/policy_avg", "float32", ppo) == tuple(get("ppo").tolerances["loss/policy_avg"][1])
    assert tolerance("advantage", "bfloat16", grpo)[:2] == tuple(get("grpo").tolerances["advantage"][2])
    assert tolerance("no/such_metric", "float32", ppo) == tolerance("*", "float32", ppo)


def metric_names(name: str) -> set[str]:
    """The slash-namespaced names an algorithm's contract and tolerance rows define."""
    import importlib

    contract = importlib.import_module(f"harness.algorithms.{BUILT_IN[name]}.contract")
    found = {key for key in get(name).tolerances if "/" in key}
    for value in vars(contract).values():
        items = value if isinstance(value, (tuple, list, set, frozenset)) else (value,)
        found |= {item for item in items if isinstance(item, str) and re.fullmatch(r"[a-z_]+/[a-z_]+", item)}
    return found


@pytest.mark.parametrize("name", sorted(BUILT_IN, key=known_algorithms().index))
def test_nothing_outside_an_algorithms_folder_names_one_of_its_metrics(name):
    names = metric_names(name)
    assert len(names) >= 5, names  # the contract was read: a glob that sees nothing proves nothing
    own = ROOT / "harness" / "algorithms" / BUILT_IN[name]
    named = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path.is_relative_to(own) or path.is_relative_to(ROOT / "harness" / "bench"):
            continue  # the benchmark measures the PPO gate on purpose (docs/bench.md)
        text = path.read_text(encoding="utf-8")
        hits = sorted(n for n in names if f'"{n}"' in text or f"'{n}'" in text)
        if hits:
            named[str(path.relative_to(ROOT))] = hits
    assert named == {}
