"""The two rules of architecture, checked on the source: the watched never knows, the oracle never shares."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported(path: Path) -> set[str]:
    """Top-level package names that `path` imports (absolute imports; relative ones stay in the package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_reference_trainer_never_imports_the_harness():
    files = sorted((ROOT / "reference_ppo").glob("*.py"))
    assert {"trainer.py", "toy.py", "config.py"} <= {p.name for p in files}
    assert [p.name for p in files if "harness" in imported(p)] == []


def test_oracle_and_its_inputs_never_import_the_trainer():
    # the oracle, and what it builds on, recompute from records only
    for name in ("oracle.py", "spy.py", "tolerances.py", "report.py", "scenarios.py", "grad.py", "runner.py"):
        assert "reference_ppo" not in imported(ROOT / "harness" / name), name
