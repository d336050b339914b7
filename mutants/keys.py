"""What a mutmut mutant is, independent of mutmut's number for it: the key the triage file matches.

mutmut numbers the mutants of a function in the order it makes them (`x_masked_mean__mutmut_3`), so one line
added to a function renumbers every mutant after it. The triage (mutants/equivalent.toml) therefore names a
mutant by its description instead: the function, the stripped source line, the 1-based column of the change in
that stripped line, the replaced text and its replacement, and, where the same line text appears more than once
in the function, which of those lines (`occurrence`, 1-based). mutmut_collect.py gives each record its `line`,
`original` and `replacement`; `describe` adds the column and the occurrence, from the source the record's
location counts in.
"""

from __future__ import annotations

import ast
import dataclasses

from .model import MutantRecord


def function_spans(source: str) -> dict[str, tuple[int, int]]:
    """{`f` or `Class.method`: (first line, last line)} of the functions of `source`, 1-based, `def` line first."""
    spans = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            spans[node.name] = (node.lineno, node.end_lineno)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    spans[f"{node.name}.{item.name}"] = (item.lineno, item.end_lineno)
    return spans


def occurrence(function_lines: list[str], index: int) -> int | None:
    """Which of the lines of `function_lines` with the stripped text of line `index` it is (1-based); None if the
    text is there once."""
    text = function_lines[index].strip()
    same = [i for i, line in enumerate(function_lines) if line.strip() == text]
    return same.index(index) + 1 if len(same) > 1 else None


def describe(records, sources: dict[str, str]) -> tuple[MutantRecord, ...]:
    """`records` with the column of each change in its stripped line and the line's occurrence in its function.

    `sources`: {file: text}, the source each record's location counts in (mutmut_results.json's `sources`). A
    record whose file is not there, that changed no text, or whose location is not a line of its function with
    its `line`'s text, is left as it is.
    """
    lines_by_file: dict[str, list[str]] = {}
    spans_by_file: dict[str, dict[str, tuple[int, int]]] = {}
    out = []
    for r in records:
        start = r.location.start
        if start is None or r.file not in sources:
            out.append(r)
            continue
        if r.file not in lines_by_file:
            lines_by_file[r.file] = sources[r.file].splitlines()
            spans_by_file[r.file] = function_spans(sources[r.file])
        lines = lines_by_file[r.file]
        first, last = spans_by_file[r.file].get(r.function, (0, -1))
        if not first <= start.line <= last or lines[start.line - 1].strip() != r.line:
            out.append(r)  # a location that is not in its function's source (a record made up by a test)
            continue
        raw = lines[start.line - 1]
        column = start.column - (len(raw) - len(raw.lstrip()))
        out.append(
            dataclasses.replace(
                r, column=column, occurrence=occurrence(lines[first - 1 : last], start.line - first)
            )
        )
    return tuple(out)

