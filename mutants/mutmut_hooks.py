"""The pytest plugin of mutmut's runs: copied into the scratch project as `ppo_mutmut_hooks.py`.

`python -m mutants mutmut` copies this file, alone, next to the scratch copy of the
project, and `[tool.mutmut] pytest_add_cli_args` loads it with `-p ppo_mutmut_hooks`.
It is therefore self-contained: it imports nothing of the `mutants` package, which
is not copied. It only acts when mutmut runs the suite (MUTANT_UNDER_TEST is set):

- a Hypothesis profile (`derandomize`, no database, no deadline, the
  `differing_executors` health check suppressed) is loaded, so a mutant's verdict
  never depends on an example database or on mutmut's forked executors;
- while mutmut collects its per-test statistics (MUTANT_UNDER_TEST=stats), the
  harness's session-wide observation cache is emptied before each test, so each
  test really calls the trainer functions it checks. Without that, a test that
  only reads another test's cached run (freshness, rollout_objectives) would be
  linked to no function and mutmut would never run it against a mutant;
- mutmut moves the body of every function it mutates into generated functions
  (`x_masked_whiten__mutmut_orig`, `xǁPPOTrainerǁmicro_step__mutmut_3`) behind a
  trampoline of the original name. The harness names a spied call by the
  function that makes it (its code object's name), so the generated functions'
  code objects get back the name of the function they stand for; without that,
  no call inside `masked_whiten` would be recognised as the whitening (nor one
  in `GRPOTrainer.micro_step` as the GRPO loss);
- while mutmut runs a mutant, the selected tests run cheapest first, by the
  durations of mutmut's stats run (`mutmut-stats.json`, beside the working
  directory mutmut runs pytest in). mutmut runs pytest with `-x`, so a killed
  mutant costs the tests up to its first failing one: a cheap check that fails
  first spares the expensive ones. The order changes no verdict: a survivor
  still runs every selected test;
- a mutant that `mutants/equivalent.toml` triages (equivalent, or a missing-check
  survivor) is not run when the driver hands over the triage (`PPO_MUTMUT_SKIP`
  names a JSON file of those entries, by function, keyed by what each mutant is:
  line, column, occurrence, original, replacement) and the mutant's function is
  exactly its original's with an entry's change made, text for text. The session
  then exits 34, mutmut's "skipped". A mutant that is another change, or the same
  change at another place, matches no entry and runs;
- when a session against a mutant exits 2, the plugin writes why into the folder
  `PPO_MUTMUT_EXIT2` names: the harness's configuration error (the mutated trainer
  rejects the gate's valid configuration: a detection), or anything else (an
  interruption, a collection error: no verdict, which the driver reruns once);
- a test that runs the trainer only in processes it starts (the two-process gate,
  harness/ranks_suite/test_verify_dist.py) is linked by mutmut's stats run to no function, since
  the stats of those processes never reach mutmut. When the driver hands over the links
  (`PPO_MUTMUT_RANK_LINKS` names a JSON file: the tests and the functions they exercise, from
  the algorithm's `rank_functions`), the plugin adds those functions to such a test as the
  stats run ends it, so mutmut runs it against their mutants; and while the stats run runs it,
  the processes it starts are not told they are in one (no MUTANT_UNDER_TEST in their
  environment: they run the unmutated trainer and record nothing). Against a mutant they
  inherit MUTANT_UNDER_TEST and run that mutant.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
from pathlib import Path
from types import CodeType, FunctionType

import pytest
from hypothesis import HealthCheck, settings

STATS_FILE = "mutmut-stats.json"
SKIP_ENV = "PPO_MUTMUT_SKIP"
LINKS_ENV = "PPO_MUTMUT_RANK_LINKS"
EXIT2_ENV = "PPO_MUTMUT_EXIT2"  # a folder: why each mutant's session exited 2, one JSON file per mutant
SKIPPED_EXIT = 34  # mutmut's exit code for a skipped mutant
# the values mutmut gives MUTANT_UNDER_TEST when no mutant is active: its generation, stats, clean and forced-fail runs
NOT_A_MUTANT = ("", "mutant_generation", "stats", "fail", "list_all_tests")


def mutated_modules() -> tuple[str, ...]:
    """Every module mutmut may mutate: each registered algorithm's mutated files (its `mutation.files`, read from the
    registry here, where this package is not importable; a test keeps it in step with mutmut_algorithms.ALGORITHMS).
    In a run over one algorithm the other algorithms' own modules hold no generated function, and nothing of them is
    renamed."""
    from harness.algorithms import get, known_algorithms

    files = [f for name in known_algorithms() if (m := get(name).mutation) is not None for f in m.files]
    return tuple(dict.fromkeys(path.removesuffix(".py").replace("/", ".") for path in files))


# x_<function>__mutmut_<n|orig>, or xǁ<Class>ǁ<method>__mutmut_<n|orig> (mutmut's names for what it generates)
GENERATED = re.compile(r"^(?:x_|x\u01c1[^\u01c1]+\u01c1)(?P<name>.+?)__mutmut_(?:orig|\d+)$")


def original_name(generated: str) -> str | None:
    """The name of the function a generated function of mutmut stands for; None for any other name."""
    match = GENERATED.match(generated)
    return match.group("name") if match else None


def _renamed(code: CodeType) -> CodeType:
    """`code` and the code objects nested in it with every generated name in their qualified names undone."""
    parts = code.co_qualname.split(".")
    qualname = ".".join(original_name(part) or part for part in parts)
    consts = tuple(_renamed(c) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_name=original_name(code.co_name) or code.co_name, co_qualname=qualname, co_consts=consts)


def restore_code_names(module) -> int:
    """Give the generated functions of `module` (and of its classes) their original code names; how many."""
    count = 0
    namespaces = [vars(module)] + [vars(v) for v in vars(module).values() if isinstance(v, type)]
    for namespace in namespaces:
        for value in list(namespace.values()):
            function = getattr(value, "__func__", value)  # staticmethod / classmethod
            if isinstance(function, FunctionType) and original_name(function.__name__):
                function.__code__ = _renamed(function.__code__)
                count += 1
    return count


def _under_mutmut() -> bool:
    """Whether mutmut runs this pytest session: outside it the plugin must change nothing."""
    return "MUTANT_UNDER_TEST" in os.environ


def _stats_durations(folder: Path) -> dict[str, float]:
    """Each test's duration in mutmut's stats run, by node id; empty where the file is missing or unreadable."""
    try:
        data = json.loads((folder / STATS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    durations = data.get("duration_by_test") if isinstance(data, dict) else None
    return {str(k): float(v) for k, v in durations.items()} if isinstance(durations, dict) else {}


def cheapest_first(items: list, durations: dict[str, float]) -> list:
    """`items` ordered by their stats-run duration (unknown ones last), ties kept in collection order."""
    return sorted(items, key=lambda item: durations.get(item.nodeid, float("inf")))


def _generated(name: str):
    """(the generated function of mutant `name`, its original's), from the imported mutated module; Nones if absent."""
    module_name, _, generated = name.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None or "__mutmut_" not in generated:
        return None, None
    namespace = vars(module)
    if generated.startswith("x\u01c1"):
        namespace = vars(getattr(module, generated[2:].partition("\u01c1")[0], object))
    orig = generated.rpartition("__mutmut_")[0] + "__mutmut_orig"
    unwrap = lambda value: getattr(value, "__func__", value)  # noqa: E731 - staticmethod / classmethod
    return unwrap(namespace.get(generated)), unwrap(namespace.get(orig))


def apply_entry(orig_lines: list[str], entry: dict) -> list[str] | None:
    """The function's lines with the triaged change made, or None where the entry does not fit them exactly.

    `orig_lines`: the function from its `def` line on; `entry` (the driver's skip file, from the triage file):
    `line` (stripped), `column` (1-based, counted from the line's first non-blank character, 0 or less where the
    change begins in the indentation; None: the one place `original` occurs in the line),
    `occurrence` (which of the function's lines with that text, 1-based; None: there is one), `original`,
    `replacement`.
    """
    text, original = entry.get("line"), entry.get("original") or ""
    same = [i for i, line in enumerate(orig_lines) if line.strip() == text]
    wanted = entry.get("occurrence")
    if wanted is None and len(same) == 1:
        index = same[0]
    elif isinstance(wanted, int) and len(same) > 1 and 1 <= wanted <= len(same):
        index = same[wanted - 1]
    else:
        return None
    column = entry.get("column")
    if column is None:
        if not original or text.count(original) != 1:
            return None
        column = text.index(original) + 1
    indent = len(orig_lines[index]) - len(orig_lines[index].lstrip())
    if type(column) is not int or indent + column < 1:  # 0 or less: the change begins in the indentation
        return None
    joined = "\n".join(orig_lines)
    offset = sum(len(line) + 1 for line in orig_lines[:index]) + indent + column - 1
    if joined[offset : offset + len(original)] != original:
        return None
    return (joined[:offset] + str(entry.get("replacement", "")) + joined[offset + len(original) :]).split("\n")


def is_that_change(mutant_lines: list[str], orig_lines: list[str], entry: dict) -> bool:
    """Whether the mutant's function (from its `def` line on) is exactly the original's with the entry's change
    made, text for text: an entry never spares a mutant that is another change, nor the same change elsewhere."""
    changed = apply_entry(orig_lines, entry)
    return changed is not None and changed == mutant_lines


def _source_lines(function, generated: str, short: str) -> list[str]:
    """A generated function's source lines, its `def` line naming the function it stands for."""
    lines = inspect.getsource(function).splitlines()
    return [lines[0].replace(f"def {generated}(", f"def {short}(", 1), *lines[1:]] if lines else lines


def triaged(name: str) -> str | None:
    """The verdict of the triage entry that mutant `name` is exactly the change of (`equivalent`,
    `missing-check`); None otherwise (no skip file, no entry of its function, or another change).

    The driver's skip file lists the entries by function (`f` or `Class.method`), keyed by what the mutant is,
    never by mutmut's number: the plugin makes each entry's change in the original's code and compares the
    result with the mutant's.
    """
    path = os.environ.get(SKIP_ENV)
    if not path:
        return None
    generated = name.rpartition(".")[2]
    function = function_of(generated)
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8")).get(function)
    except (OSError, ValueError, AttributeError):
        return None
    mutant, orig = _generated(name)
    if not isinstance(entries, list) or not entries or mutant is None or orig is None:
        return None
    short = function.rpartition(".")[2]
    try:
        mutant_lines = _source_lines(mutant, generated, short)
        orig_lines = _source_lines(orig, generated.rpartition("__mutmut_")[0] + "__mutmut_orig", short)
    except (OSError, TypeError):
        return None
    for entry in entries:
        if isinstance(entry, dict) and is_that_change(mutant_lines, orig_lines, entry):
            return str(entry.get("verdict", "triaged"))
    return None


def function_of(generated: str) -> str:
    """The function (`f` or `Class.method`) of a generated name: `xǁPPOTrainerǁlog__mutmut_3` -> `PPOTrainer.log`."""
    base = generated.rpartition("__mutmut_")[0]
    if base.startswith("x\u01c1"):
        cls, _, method = base[2:].partition("\u01c1")
        return f"{cls}.{method}"
    return base.removeprefix("x_")


def pytest_collection_modifyitems(session, config, items) -> None:
    """While mutmut runs a mutant: skip a triaged one, else run the tests cheapest first (module docstring)."""
    name = os.environ.get("MUTANT_UNDER_TEST", "")
    if name in NOT_A_MUTANT:
        return
    verdict = triaged(name)
    if verdict is not None:
        pytest.exit(f"{name} is triaged {verdict}: not run", returncode=SKIPPED_EXIT)
    durations = _stats_durations(Path.cwd())
    if durations:
        items[:] = cheapest_first(items, durations)


def exit2_reason(session) -> dict:
    """Why a session exits 2: {"configuration": True, "detail": the harness's error} when the mutated trainer
    rejected the gate's valid configuration (a detection), else {"configuration": False, "detail": ...} (an
    interruption, a collection or usage error: no verdict)."""
    try:
        from harness.plugin import configuration_errors

        errors = configuration_errors(session.config)
    except Exception:  # noqa: BLE001 - no harness plugin: not the gate's refusal
        errors = []
    if errors:
        return {"configuration": True, "detail": str(errors[0])[:300]}
    detail = session.shouldstop or session.shouldfail or ""
    if not detail:
        detail = f"{session.testsfailed} failed of {session.testscollected} collected (interrupted, collection error)"
    return {"configuration": False, "detail": str(detail)[:300]}


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    """Against a mutant, when the session ends with exit 2: say why, for the driver (EXIT2_ENV), which counts a
    configuration error as detected and reruns any other exit 2 once."""
    name = os.environ.get("MUTANT_UNDER_TEST", "")
    folder = os.environ.get(EXIT2_ENV)
    if name in NOT_A_MUTANT or not folder or int(session.exitstatus) != 2:
        return
    try:
        path = Path(folder) / (name + ".json")
        path.write_text(json.dumps({"name": name, **exit2_reason(session)}), encoding="utf-8")
    except OSError:
        pass


def rank_links() -> dict[str, list[str]]:
    """The driver's links ({"tests": [path], "functions": [name]}); empty where none were handed over."""
    path = os.environ.get(LINKS_ENV)
    if not path:
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {"tests": [str(t) for t in data["tests"]], "functions": [str(f) for f in data["functions"]]}


def is_linked(nodeid: str, links: dict[str, list[str]]) -> bool:
    """Whether the test `nodeid` is one of the linked tests (by its file, relative to where pytest runs)."""
    path = nodeid.split("::")[0].replace("\\", "/")
    return any(path == t or path.endswith("/" + t) for t in links.get("tests", ()))


_stats_run = False
"""Whether this pytest session is mutmut's stats run (set when the session is configured)."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem) -> None:
    """In the stats run, before mutmut's own collector reads the functions a test hit: a linked test's functions."""
    if _stats_run and is_linked(item.nodeid, links := rank_links()):
        from mutmut.state import state

        state()._stats.update(links["functions"])


def pytest_configure(config) -> None:
    """Load a deterministic Hypothesis profile, so that a verdict never depends on a database or an executor."""
    global _stats_run
    _stats_run = os.environ.get("MUTANT_UNDER_TEST") == "stats"
    if not _under_mutmut():
        return
    settings.register_profile(
        "ppo-mutmut",
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.differing_executors],
    )
    settings.load_profile("ppo-mutmut")
    for name in mutated_modules():
        restore_code_names(importlib.import_module(name))


@pytest.fixture(autouse=True)
def _ppo_ranks_outside_the_stats_run(request, monkeypatch):
    """In the stats run, a linked test's processes get no MUTANT_UNDER_TEST (their stats would be lost anyway)."""
    if _stats_run and is_linked(request.node.nodeid, rank_links()):
        monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    yield


@pytest.fixture(autouse=True)
def _ppo_fresh_observations_while_mutmut_collects_stats(request):
    """Empty the harness's observation cache before each test of mutmut's stats run (the verify suite's test reads it
    through the session's gate, `ppo_gate`; a test of one's own through `ppo_cache`)."""
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        if "ppo_gate" in request.fixturenames:
            request.getfixturevalue("ppo_gate").cache.clear()
        elif "ppo_cache" in request.fixturenames:
            request.getfixturevalue("ppo_cache").clear()
    yield
