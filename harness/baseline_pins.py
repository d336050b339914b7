"""How a check fails, as a baseline entry pins it (harness/baseline.py): each failing metric's diagnoses, the check's
own diagnoses, how many of its failure lines are no metric's, and whether the trainer raised.

A diagnosis is pinned as an item: a class number of docs/bug-catalogue.md (`16`), a combination (`"2+5"`, its
classes in any order), the formula of a wrong pooling the catalogue has no number for (its words), or, for a failing
metric without a diagnosis, `"none"` (no known pooling reproduces it), `"missing"` (never logged), `"nan"` (not
finite) or `"not_recomputable"`. A metric is keyed by its name, which covers every comparison of it in the check,
or by `name @ where` for one comparison (harness/verdict.py `MetricVerdict.label`), which a failing comparison is
matched with first. A key's items are the set its failing comparisons give: a different set is a change.

`pins_of(result)` is what a check's result pins (what `--write-baseline` writes); `changes(pins, result)` the lines
that say how `result` fails otherwise than `pins` say, [] when it fails just so. Nothing here imports the report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessConfigError
from harness.verdict import CheckResult, Diagnosis, MetricStatus, MetricVerdict

RAISED = "the trainer raised during the run"
"""How a check's problem begins when the trainer raised (harness/require.py writes it; this module must not import
the instruments that module imports)."""
METRIC_LINE = re.compile(r"\d+ metric\(s\) disagree: ")
"""How a check's problem that names its failing metrics begins (harness/verdict.py `Check.absorb` writes it)."""
NONE = "none"
WORDS = {NONE: "no diagnosis", "missing": "never logged", "nan": "not finite", "not_recomputable": "not recomputable"}
"""The items of a failing metric without a diagnosis, and how a line says them."""


@dataclass(frozen=True)
class Pins:
    """How a check fails: `metrics` (key -> the items of its failing comparisons, in the file's order), the items of
    the check's own diagnoses, the number of its problems that are no metric's (nor the raise), and whether the
    trainer raised."""

    metrics: tuple[tuple[str, frozenset[str]], ...] = ()
    diagnoses: frozenset[str] = frozenset()
    problems: int = 0
    raises: bool = False

    @property
    def by_key(self) -> dict[str, frozenset[str]]:
        """`metrics` as a dict."""
        return dict(self.metrics)


def item_of(diagnosis: Diagnosis | None, status: MetricStatus = MetricStatus.FAIL) -> str:
    """The item that pins a diagnosis, or a failing metric's status when it has none."""
    if diagnosis is not None:
        return "+".join(str(c) for c in sorted(diagnosis.classes)) if diagnosis.classes else diagnosis.formula
    return NONE if status is MetricStatus.FAIL else status.value


def said(items: Iterable[str]) -> str:
    """Items in words: `class 16, no diagnosis`; `nothing` for none."""
    words = []
    for item in sorted(items, key=lambda i: (not i[0].isdigit(), len(i), i)):
        if item in WORDS:
            words.append(WORDS[item])
        elif re.fullmatch(r"\d+(\+\d+)*", item):
            words.append("class " + item.replace("+", " + "))
        else:
            words.append(json.dumps(item, ensure_ascii=False))
    return ", ".join(words) or "nothing"


def split_problems(result: CheckResult) -> tuple[bool, list[str]]:
    """Whether the trainer raised, and the check's problems that are neither a metric's nor the raise."""
    raised = any(p.startswith(RAISED) for p in result.problems)
    others = [p for p in result.problems if not p.startswith(RAISED) and not METRIC_LINE.match(p)]
    return raised, others


def failing(result: CheckResult) -> list[MetricVerdict]:
    return [m for m in result.metrics if m.failed]


def pins_of(result: CheckResult) -> Pins:
    """What a failed check's result pins: a metric by its name when its failing comparisons share one set of items,
    else each comparison by its label."""
    items: dict[str, dict[str, set[str]]] = {}
    for m in failing(result):
        items.setdefault(m.name, {}).setdefault(m.label, set()).add(item_of(m.diagnosis, m.status))
    metrics: list[tuple[str, frozenset[str]]] = []
    for name, labels in items.items():
        sets = {frozenset(s) for s in labels.values()}
        if len(sets) == 1:
            metrics.append((name, sets.pop()))
        else:
            metrics += [(label, frozenset(s)) for label, s in labels.items()]
    raised, others = split_problems(result)
    return Pins(tuple(metrics), frozenset(item_of(d) for d in result.diagnoses), len(others), raised)


def changes(pins: Pins, result: CheckResult) -> list[str]:
    """How the failed `result` fails otherwise than `pins` say, one line each ([] when just so): the raise, the
    problems that are no metric's, the check's own diagnoses, then each metric that fails with other items than
    pinned or is not pinned (a pinned metric that no longer fails is no change)."""
    lines = []
    raised, others = split_problems(result)
    if raised and not pins.raises:
        lines.append("the trainer raised, which the entry does not pin (raises = true)")
    elif pins.raises and not raised:
        lines.append("the trainer no longer raises (the entry pins raises = true)")
    if len(others) != pins.problems:
        first = f": {others[0].splitlines()[0]}" if others else ""
        lines.append(f"{len(others)} problem(s) that are no metric's, pinned {pins.problems}{first}")
    own = frozenset(item_of(d) for d in result.diagnoses)
    if own != pins.diagnoses:
        lines.append(f"the check's own diagnoses: {said(pins.diagnoses)} -> {said(own)}")
    pinned = pins.by_key
    by_where = {key.partition(" @ ")[0] for key in pinned if " @ " in key}
    seen: dict[str, set[str]] = {}
    for m in failing(result):  # a comparison not pinned is named as the entry names its metric: by where, or not
        key = m.label if m.label in pinned or (m.name not in pinned and m.name in by_where) else m.name
        seen.setdefault(key, set()).add(item_of(m.diagnosis, m.status))
    for key, items in seen.items():
        if key not in pinned:
            lines.append(f"{key} fails ({said(items)}), which the entry does not pin")
        elif frozenset(items) != pinned[key]:
            lines.append(f"{key}: {said(pinned[key])} -> {said(items)}")
    return lines


KEYS = ("metrics", "diagnoses", "problems", "raises")
"""An entry's keys that pin how its check fails."""


def parse_pins(table: Mapping[str, Any], where: str) -> Pins | None:
    """The pins of an entry's table, or None when it has none of KEYS (the check-level form); HarnessConfigError (one
    line beginning with `where`) for a bad one."""
    if not any(key in table for key in KEYS):
        return None
    metrics = table.get("metrics", {})
    if not isinstance(metrics, dict):
        raise HarnessConfigError(f"{where}: `metrics` must be a table of metric = [classes], e.g. {{ entropy = [16] }}")
    pinned = []
    for key, value in metrics.items():
        if not key.strip():
            raise HarnessConfigError(f"{where}: a metric of `metrics` has an empty name")
        pinned.append((key, parse_items(value, f"{where}: metric {json.dumps(key)}")))
    own = table.get("diagnoses", [])
    diagnoses = parse_items(own, f"{where}: `diagnoses`") if own != [] else frozenset()
    problems = table.get("problems", 0)
    if isinstance(problems, bool) or not isinstance(problems, int) or problems < 0:
        raise HarnessConfigError(
            f"{where}: `problems` must be a whole number, how many of its problems are no metric's"
        )
    raises = table.get("raises", False)
    if not isinstance(raises, bool):
        raise HarnessConfigError(f"{where}: `raises` must be true or false")
    return Pins(tuple(pinned), diagnoses, problems, raises)


def parse_items(value: Any, where: str) -> frozenset[str]:
    """A pinned value's items: one item or a non-empty list of them (see the module docstring)."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise HarnessConfigError(f'{where}: name at least one diagnosis: a class number, "none", "missing", "nan", ...')
    items = set()
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            items.add(str(v))
        elif isinstance(v, str) and re.fullmatch(r"\s*\d+(\s*\+\s*\d+)*\s*", v):
            items.add("+".join(str(c) for c in sorted(int(c) for c in v.split("+"))))
        elif isinstance(v, str) and v.strip():
            items.add(v)
        else:
            raise HarnessConfigError(
                f"{where}: {json.dumps(v)} is no diagnosis: write a class number (16), a combination "
                '("2+5"), a formula, or "none", "missing", "nan", "not_recomputable"'
            )
    return frozenset(items)


def toml_value(items: frozenset[str]) -> str:
    """Items as a TOML array: class numbers bare, in order, then the others as strings."""
    numbers = sorted(int(i) for i in items if i.isdigit())
    words = sorted(i for i in items if not i.isdigit())
    return "[" + ", ".join([*map(str, numbers), *(toml_string(w) for w in words)]) + "]"


def toml_string(text: str) -> str:
    """`text` as a TOML basic string (JSON's escapes are TOML's, but for DEL, which TOML wants escaped)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_key(key: str) -> str:
    """A table key, bare when TOML allows it, else quoted."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def render_pins(pins: Pins, result: CheckResult | None = None) -> list[str]:
    """The lines of an entry that write `pins` (after its check, reason and link); `result` adds a comment naming the
    problems that are no metric's."""
    lines = []
    if pins.raises:
        lines.append("raises = true")
    if pins.problems:
        if result is not None:
            lines += [f"# {p.splitlines()[0][:150]}" for p in split_problems(result)[1]]
        lines.append(f"problems = {pins.problems}")
    if pins.diagnoses:
        lines.append(f"diagnoses = {toml_value(pins.diagnoses)}")
    if pins.metrics:
        lines.append("[known.metrics]")
        lines += [f"{toml_key(key)} = {toml_value(items)}" for key, items in pins.metrics]
    if not lines:  # a failed check pins one of them at least; an entry with none of KEYS is the check-level form
        lines.append("problems = 0")
    return lines
