"""The model and its renderers import one way: harness/verdict.py and harness/baseline.py import nothing of
harness/report/, and no module among them imports one that imports it back (a lazy or TYPE_CHECKING import counts)."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[3] / "harness"


def modules(harness: Path) -> dict[str, Path]:
    """The model's modules and the report package's, by dotted name."""
    found = {"harness.verdict": harness / "verdict.py", "harness.baseline": harness / "baseline.py"}
    for path in sorted((harness / "report").glob("*.py")):
        name = "harness.report" if path.name == "__init__.py" else f"harness.report.{path.stem}"
        found[name] = path
    return found


def imported(name: str, path: Path) -> set[str]:
    """Every module name `path` imports anywhere (top level, in a function, under TYPE_CHECKING), and for
    `from X import y` also `X.y`, which may be a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (module -> the modules of the graph it imports), or [] when there is none."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = "done"
        return []

    return next((found for node in sorted(graph) if node not in state and (found := visit(node, [node]))), [])


def graph_of(harness: Path) -> dict[str, set[str]]:
    every = modules(harness)
    return {name: imported(name, path) & set(every) - {name} for name, path in every.items()}


def test_the_model_imports_no_renderer_and_the_report_has_no_cycle():
    every = modules(HARNESS)
    for model in ("harness.verdict", "harness.baseline"):
        leaks = sorted(
            n for n in imported(model, every[model]) if n == "harness.report" or n.startswith("harness.report.")
        )
        assert not leaks, f"{model} imports {leaks}"
    assert cycle(graph_of(HARNESS)) == []
    assert "harness.report.markdown" not in graph_of(HARNESS)["harness.report.model"]


def test_a_cycle_is_found(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "verdict.py").write_text("def line():\n    from harness.report.format import line\n")
    (tmp_path / "baseline.py").write_text("")
    (tmp_path / "report" / "__init__.py").write_text("")
    (tmp_path / "report" / "format.py").write_text("from harness.verdict import Diagnosis\n")
    (tmp_path / "report" / "model.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                  "    from .markdown import render\n")  # fmt: skip
    (tmp_path / "report" / "markdown.py").write_text("from .model import Report\n")
    graph = graph_of(tmp_path)
    assert cycle(graph) == ["harness.report.format", "harness.verdict", "harness.report.format"]
    del graph["harness.verdict"], graph["harness.report.format"]
    assert cycle(graph) == ["harness.report.markdown", "harness.report.model", "harness.report.markdown"]
