"""The rules of architecture, checked on the source by glob, so that every new module is covered.

1. The trainer under test never knows it is watched: nothing under `reference_trainers/` (nor under
   `reference_ppo/`, its earlier name) imports `harness`.
2. The oracle never shares code with what it checks: no module of `harness/` imports a trainer
   (`reference_trainers`, `reference_ppo`, `trl`) or a module of a `targets/` folder, except the targets themselves
   and the target resolver (`harness/targets/__init__.py`, which loads targets by name at run time). Live mode and
   the bench, which run a trainer themselves, find their algorithm's target modules through the registry.
3. No import cycle in `harness/` or `mutants/`: the graph of their modules' imports, read with `ast` (imports inside
   functions and under TYPE_CHECKING too, relative ones resolved, and modules named in strings: a name handed to
   `importlib.import_module`, a `module:attr` path, a dotted module name), has no cycle.
4. No module of `harness/` or `mutants/` is over MAX_LINES lines.
5. No module of `harness/` or `mutants/` outside an algorithm's folder (`harness/algorithms/<name>/`) imports that
   folder, plainly or by name (the graph of rule 3): the registry (`harness/algorithms/__init__.py`) loads an
   algorithm by its entry point, and the core reads what the algorithm declares.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINER_PACKAGES = ("reference_trainers", "reference_ppo")
"""The reference trainers' package and its alias (reference_ppo/__init__.py): rule 1 covers both."""
TRAINERS = {*TRAINER_PACKAGES, "trl"}
GRAPHED = ("harness", "mutants")
"""The packages rules 3 and 4 cover."""


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The module `node` imports from, a relative import resolved against `package` (the importing module's)."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".")
    parent = ".".join(parts[: len(parts) - node.level + 1])
    return f"{parent}.{base}" if base else parent


def imported(source: str, module: str) -> set[str]:
    """Dotted names that `source` (the module `module`) imports, relative imports resolved."""
    names = set()
    package = module.rsplit(".", 1)[0]  # a module's package; for pkg.__init__, pkg itself
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path, root: Path = ROOT) -> str:
    """`harness.algorithms.ppo.view` for harness/algorithms/ppo/view.py."""
    return ".".join(path.relative_to(root).with_suffix("").parts)


RESOLVER = ROOT / "harness" / "targets" / "__init__.py"


def source_of(name: str) -> Path | None:
    """The file of the project module `name` (None for a name that is not a module of this project)."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_relative_to(ROOT / "harness") and candidate.exists():
            return candidate
    return None


def is_target_module(name: str) -> bool:
    """True for a module of a `targets/` folder other than the resolver."""
    path = source_of(name)
    return path is not None and path != RESOLVER and "targets" in path.relative_to(ROOT).parts


def rule_breaks(path: Path) -> list[str]:
    """The imports of `path` that break a rule (empty when it keeps both)."""
    name = module_name(path)
    names = imported(path.read_text(encoding="utf-8"), name)
    if any(path.is_relative_to(ROOT / package) for package in TRAINER_PACKAGES):
        return sorted(n for n in names if n.split(".")[0] == "harness")
    if "targets" in path.relative_to(ROOT).parts:
        return []
    return sorted(n for n in names if n.split(".")[0] in TRAINERS or is_target_module(n))


def sources(package: str) -> list[Path]:
    """Every Python file under `package` (failing when there is none: a glob that sees nothing proves nothing)."""
    found = sorted((ROOT / package).rglob("*.py"))
    assert found, f"no Python files under {package}/"
    return found


@pytest.mark.parametrize("package", [*TRAINER_PACKAGES, "harness"])
def test_no_module_breaks_a_rule(package):
    broken = {module_name(p): rule_breaks(p) for p in sources(package)}
    assert {name: why for name, why in broken.items() if why} == {}


def test_the_globs_cover_the_oracle_and_the_algorithm_folders():
    names = {module_name(p) for p in sources("harness")}
    assert {"harness.oracle.pooling", "harness.algorithms.ppo.view", "harness.algorithms.ppo.oracle.expect"} <= names


@pytest.mark.parametrize(
    "where, source",
    [
        ("harness/oracle/new_pooling.py", "from reference_trainers import ppo\n"),
        ("harness/oracle/old_name.py", "from reference_ppo import trainer\n"),
        ("harness/algorithms/ppo/shortcut.py", "import trl.experimental.ppo\n"),
        ("harness/algorithms/ppo/expect2.py", "from .targets.reference import factory\n"),
        ("harness/compare2.py", "from harness.algorithms.ppo.targets import trl\n"),
        ("harness/oracle/world.py", "from harness.targets.toy import toy_world\n"),
        ("harness/bench/live2.py", "from harness.algorithms.grpo.targets.live import bench\n"),
        ("harness/bench/live.py", "from reference_trainers import grpo\n"),
        ("harness/live/__init__.py", "import trl\n"),
        ("harness/live/__init__.py", "from harness.algorithms.grpo.targets.live import trl\n"),  # no driver
        ("reference_trainers/watched.py", "from harness.instrument.spy import Spy\n"),
        ("reference_ppo/watched.py", "from harness.instrument.spy import Spy\n"),
    ],
)
def test_a_module_that_breaks_a_rule_is_caught(tmp_path, monkeypatch, where, source):
    path = ROOT / where
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source if self == path else "")
    assert rule_breaks(path), f"{where} importing {source.strip()!r} was not caught"


def test_targets_may_import_their_trainer():
    path = ROOT / "harness/algorithms/ppo/targets/reference.py"
    names = imported(path.read_text(encoding="utf-8"), module_name(path))
    assert any(n.startswith("reference_trainers") for n in names)
    assert rule_breaks(path) == []


# ---------------------------------------------------------------- rule 3: no import cycle


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of `packages` under `root`: its dotted name (a package's, for its `__init__.py`) -> its file."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(path, root).removesuffix(".__init__")] = path
    return found


LOADERS = {"import_module", "__import__"}
"""The functions whose first argument, a string, is a module imported by name."""


def _called(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def by_name(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The project modules `tree` names in strings: a name handed to `importlib.import_module`, a `module:attr`
    path (a target's factory, loaded by the resolver), or a dotted name that is exactly a module's (a module path
    handed to a loader: pytest's `-p` and `--pyargs`, a preload list). A logger's name is no module's import."""
    loggers = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) == "getLogger" for a in n.args}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in LOADERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in loggers:
            module, colon, attr = node.value.partition(":")
            if "." in module and module in known and (not colon or attr.isidentifier()):
                names.add(module)
    return {name for name in names if name in known}


def ancestors(name: str) -> list[str]:
    """`a`, `a.b` for `a.b.c`: the packages whose `__init__` runs before the module does."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules the module `name` imports, anywhere in it (inside functions, under TYPE_CHECKING),
    plainly or by name.

    Importing `a.b.c` runs the `__init__` of `a` and of `a.b` first: `import harness.X` counts as importing the
    package `harness` too, and `from harness.live.session import ...` as importing `harness.live`'s `__init__`,
    except where the importer is itself inside that package (its package's `__init__` runs before it anyway). A
    name taken from a package (`from harness.live import LiveSession`, `from . import name` that is no
    submodule) is an import of that package's `__init__`, wherever the importer is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    explicit = set(by_name(tree, known))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            explicit.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, package)
            explicit.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    inside = {name, *ancestors(name)}
    found = {m for m in explicit if m in known}
    found |= {a for m in explicit for a in ancestors(m) if a in known and a not in inside}
    return found - {name}


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = GRAPHED) -> dict[str, set[str]]:
    """Module -> the project modules it imports (see `imports_of`)."""
    known = modules(root, packages)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def knots(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The graph's strongly connected sets of more than one module (each holds a cycle), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(frozenset(members))
    return found


def cycle_in(graph: dict[str, set[str]], knot: frozenset[str]) -> list[str]:
    """A shortest cycle through the first module of `knot`, as the modules in import order, the first repeated."""
    first = min(knot)
    came: dict[str, str] = {}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for step in sorted(graph[node] & knot):
            if step == first:
                path = [node]
                while path[-1] != first:
                    path.append(came[path[-1]])
                return [first, *reversed(path[:-1]), first]
            if step not in came:
                came[step] = node
                queue.append(step)
    raise AssertionError(f"no cycle through {first}")  # a knot always holds one


def said(graph: dict[str, set[str]], knot: frozenset[str]) -> str:
    return " -> ".join(cycle_in(graph, knot)) + f" ({len(knot)} modules tied)"


def test_no_import_cycle_in_harness_or_mutants():
    graph = import_graph()
    assert [said(graph, knot) for knot in sorted(knots(graph), key=min)] == []


def test_the_graph_sees_what_the_bench_and_live_mode_load():
    """The imports rule 3 must see: inside a function, a package's `__init__`, a relative form, a target's
    `module:factory`."""
    graph = import_graph()
    assert "harness.bench.live" in graph["harness.bench.cli"]  # inside main()
    assert "harness.live.session" in graph["harness.live"]  # inside __getattr__, relative
    assert "harness.algorithms.grpo.targets.live.reference" in graph["harness.algorithms.grpo.algorithm"]  # Live
    assert "harness.algorithms.ppo.targets.scaled" in graph["harness.algorithms.ppo.bench"]  # "...scaled:medium"
    assert "harness.algorithms.ppo.bench" in graph["harness.algorithms.ppo.algorithm"]  # its Bench
    assert "harness.verify_command" in graph["mutants.gate_client"]  # a preload list's module names


def package(root: Path, files: dict[str, str]) -> Path:
    """The files (path -> source) of a made-up package under `root`, each folder with an `__init__.py`."""
    for where, source in files.items():
        path = root / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    for folder in {p.parent for p in root.rglob("*.py")}:
        (folder / "__init__.py").touch()
    return root


@pytest.mark.parametrize(
    "files, cycle",
    [
        ({"pkg/a.py": "from pkg import b\n", "pkg/b.py": "def f():\n    from . import a\n"},
         ["pkg.a", "pkg.b", "pkg.a"]),
        ({"pkg/a.py": "import importlib\nB = importlib.import_module('pkg.b')\n", "pkg/b.py": "from pkg.a import B\n"},
         ["pkg.a", "pkg.b", "pkg.a"]),
        ({"pkg/a.py": "FACTORY = 'pkg.b:factory'\n", "pkg/b.py": "from .a import FACTORY\n"},
         ["pkg.a", "pkg.b", "pkg.a"]),
        ({"pkg/a.py": "import pkg.sub.c\n", "pkg/sub/__init__.py": "from pkg.a import X\n", "pkg/sub/c.py": ""},
         ["pkg.a", "pkg.sub", "pkg.a"]),  # importing pkg.sub.c runs pkg.sub's __init__
        ({"pkg/a.py": "from pkg.sub import c\n", "pkg/sub/c.py": "from typing import TYPE_CHECKING\n"
          "if TYPE_CHECKING:\n    from ..a import X\n"}, ["pkg.a", "pkg.sub.c", "pkg.a"]),
        ({"pkg/sub/__init__.py": "def __getattr__(n):\n    from .c import n\n",
          "pkg/sub/c.py": "from pkg.sub import d\nfrom pkg.sub import X\n", "pkg/sub/d.py": ""},
         ["pkg.sub", "pkg.sub.c", "pkg.sub"]),
    ],
    ids=["in a function, relative", "import_module", "module:factory", "a package's __init__", "TYPE_CHECKING",
         "a name of the package"],
)  # fmt: skip
def test_a_cycle_is_named(tmp_path, files, cycle):
    graph = import_graph(package(tmp_path, files), ("pkg",))
    assert [cycle_in(graph, knot) for knot in knots(graph)] == [cycle]


def test_a_package_without_a_cycle_has_none(tmp_path):
    """A logger's name, a submodule imported from its own package, a prose string and a name outside the packages
    are not cycles."""
    files = {
        "pkg/__init__.py": "def __getattr__(n):\n    from . import a\n    return a\n",
        "pkg/a.py": "import logging\nfrom . import b\nlogging.getLogger('pkg.b')\nimport os.path\n",
        "pkg/b.py": "import logging\nlog = logging.getLogger('pkg.a')\nfrom pkg import c\n'see pkg.a for why'\n",
        "pkg/c.py": "",
    }
    graph = import_graph(package(tmp_path, files), ("pkg",))
    assert knots(graph) == []
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": set()}


# ---------------------------------------------------------------- rule 4: no module over MAX_LINES lines

MAX_LINES = 350
TOO_LONG: dict[str, str] = {}
"""Modules still over MAX_LINES: each must still be over (a split one leaves this list), and no other may be."""


def lines_of(path: Path) -> int:
    """Physical lines, as `wc -l` counts them for a file ending in a newline."""
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_max_lines():
    over = {str(p.relative_to(ROOT)): lines_of(p) for package in GRAPHED for p in sources(package)}
    over = {path: n for path, n in over.items() if n > MAX_LINES}
    assert {path: n for path, n in over.items() if path not in TOO_LONG} == {}
    assert [path for path in TOO_LONG if path not in over] == [], "a module of TOO_LONG is no longer over"


# ---------------------------------------------------------------- rule 5: an algorithm's folder is its own

ALGORITHMS = ROOT / "harness" / "algorithms"
OUTSIDE_IMPORTERS: dict[str, str] = {}
"""Modules outside an algorithm's folder that still import it, and why (none today; the test fails when a listed
one no longer does, so the list can only shrink)."""


def algorithm_of(name: str) -> str | None:
    """`ppo` for `harness.algorithms.ppo` and every module under it; None for any other module (the registry's too)."""
    parts = name.split(".")
    if parts[:2] == ["harness", "algorithms"] and len(parts) > 2 and (ALGORITHMS / parts[2]).is_dir():
        return parts[2]
    return None


def importers_of_algorithms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each module outside the algorithm folders -> the algorithm modules it imports (plainly or by name)."""
    found = {}
    for name, imports in graph.items():
        if algorithm_of(name) is None:
            hits = {m for m in imports if algorithm_of(m) is not None}
            if hits:
                found[name] = hits
    return found


def test_no_module_outside_an_algorithm_folder_imports_it():
    importers = importers_of_algorithms(import_graph())
    assert {n: sorted(m) for n, m in importers.items() if n not in OUTSIDE_IMPORTERS} == {}
    assert sorted(set(OUTSIDE_IMPORTERS) - set(importers)) == [], "listed, but no longer importing: take it off"


@pytest.mark.parametrize(
    "source",
    [
        "from harness.algorithms.ppo.spec import ScenarioSpec\n",
        "def f():\n    from harness.algorithms.grpo import live\n",
        'SIZES = "harness.algorithms.ppo.bench:SIZES"\n',  # by name
        'import importlib\nimportlib.import_module("harness.algorithms.grpo.live")\n',
    ],
)
def test_an_import_of_an_algorithm_from_outside_is_caught(tmp_path, source):
    root = package(tmp_path, {"harness/bench/extra.py": source, "harness/algorithms/__init__.py": "",
                              "harness/algorithms/ppo/__init__.py": "", "harness/algorithms/ppo/spec.py": "",
                              "harness/algorithms/ppo/bench.py": "", "harness/algorithms/grpo/__init__.py": "",
                              "harness/algorithms/grpo/live.py": ""})  # fmt: skip
    graph = import_graph(root, ("harness",))
    assert "harness.bench.extra" in importers_of_algorithms(graph)
