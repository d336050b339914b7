"""docs/using-the-gate.md's GRPO section against the code: its table of GRPOSpec's fields is
`dataclasses.fields(GRPOSpec)` (names, types and defaults, in order), and its shortened target runs."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from pathlib import Path

import pytest

from harness.algorithms import case, get
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import ObservationCache
from harness.report.format import check_failure_lines

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "using-the-gate.md"
EXAMPLE_SRC = ROOT / "examples" / "external_grpo" / "src"


def section(text: str, heading: str) -> str:
    """The text under `heading` (a '### ' heading) up to the next heading of that level or above."""
    start = text.index(f"\n### {heading}\n")
    after = re.search(r"\n#{2,3} ", text[start + 1 :])
    return text[start : start + 1 + after.start()] if after else text[start:]


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row, `\\|` unescaped and backticks dropped."""
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [p.strip().replace("\\|", "|").strip("`") for p in parts]


def guide_fields() -> list[tuple[str, str, str]]:
    """(name, type, default) of every row of the guide's GRPOSpec table."""
    table = section(GUIDE.read_text(encoding="utf-8"), "GRPOSpec's fields")
    rows = [cells(line) for line in table.splitlines() if line.startswith("| `")]
    assert rows, "the guide's GRPOSpec table has no row"
    return [(name, kind, default) for name, kind, default, _ in rows]


def code_fields() -> list[tuple[str, str, str]]:
    return [(f.name, str(f.type), repr(f.default)) for f in dataclasses.fields(GRPOSpec)]


def test_the_guide_lists_every_grpospec_field_in_order():
    listed, fields = guide_fields(), code_fields()
    missing = [f[0] for f in fields if f[0] not in {g[0] for g in listed}]
    extra = [g[0] for g in listed if g[0] not in {f[0] for f in fields}]
    assert not missing and not extra, f"docs/using-the-gate.md: missing {missing}, not in GRPOSpec {extra}"
    assert [g[0] for g in listed] == [f[0] for f in fields], "the table's order is not GRPOSpec's"
    wrong = [(g, f) for g, f in zip(listed, fields) if g != f]
    assert not wrong, f"(guide, code) rows that differ in type or default: {wrong}"


def guide_target(monkeypatch) -> types.ModuleType:
    """The guide's shortened GRPO target, as a module (in sys.modules while the test runs: its dataclass needs it)."""
    text = section(GUIDE.read_text(encoding="utf-8"), "Write a target")
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    module = types.ModuleType("guide_grpo_target")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, str(GUIDE), "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("check_id", ["short_window", "advantages[scale_rewards=group]", "forward_recompute"])
def test_the_guides_grpo_target_runs(check_id, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))  # the trainer it wraps: tinygrpo, the example's
    target = guide_target(monkeypatch)
    assert target.factory.algorithm == "grpo"
    result = case(check_id, "grpo").run(ObservationCache(target.factory), get("grpo").run_spec(0, "cpu", "float32"))
    assert result.passed, "\n".join(check_failure_lines(result))
