"""The two rules of architecture, checked on the source by glob, so that every new module is covered.

1. The trainer under test never knows it is watched: nothing under `reference_trainers/` (nor under
   `reference_ppo/`, its earlier name) imports `harness`.
2. The oracle never shares code with what it checks: no module of `harness/` imports a trainer
   (`reference_trainers`, `reference_ppo`, `trl`) or a module of a `targets/` folder, except the targets themselves. The
   target resolver (`harness/targets/__init__.py`) may be imported: it loads targets by name at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINER_PACKAGES = ("reference_trainers", "reference_ppo")
"""The reference trainers' package and its alias (reference_ppo/__init__.py): rule 1 covers both."""
TRAINERS = {*TRAINER_PACKAGES, "trl"}


def imported(source: str, module: str) -> set[str]:
    """Dotted names that `source` (the module `module`) imports, relative imports resolved."""
    names = set()
    package = module.rsplit(".", 1)[0]  # a module's package; for pkg.__init__, pkg itself
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    """`harness.algorithms.ppo.view` for harness/algorithms/ppo/view.py."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


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
    names = imported(path.read_text(encoding="utf-8"), module_name(path))
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
    assert {"harness.oracle.pooling", "harness.algorithms.ppo.view", "harness.algorithms.ppo.expect"} <= names


@pytest.mark.parametrize(
    "where, source",
    [
        ("harness/oracle/new_pooling.py", "from reference_trainers import ppo\n"),
        ("harness/oracle/old_name.py", "from reference_ppo import trainer\n"),
        ("harness/algorithms/ppo/shortcut.py", "import trl.experimental.ppo\n"),
        ("harness/algorithms/ppo/expect2.py", "from .targets.reference import factory\n"),
        ("harness/compare2.py", "from harness.algorithms.ppo.targets import trl\n"),
        ("harness/oracle/world.py", "from harness.targets.toy import toy_world\n"),
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
