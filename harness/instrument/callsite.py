"""Call-site naming: which variable a spied call's result is assigned to, read from the caller's source.

A record is named by the innermost assignment whose value contains the call (`pg_loss =
masked_mean(...)` names the site `pg_loss`), found with `ast` over the caller's file and
the exact call position (`co_positions`), with a line-range fallback. Parsed sources are
cached by file name and source hash; resolved sites by code object and instruction offset.
"""

from __future__ import annotations

import ast
import itertools
import linecache
import threading
from dataclasses import dataclass
from types import CodeType, FrameType

from .records import Site


@dataclass(frozen=True)
class _Span:
    """A source region, 1-based lines and UTF-8 byte columns, ends exclusive."""

    start: tuple[int, int]
    end: tuple[int, int]

    def contains(self, other: _Span) -> bool:
        """True when `other` lies inside this span."""
        return self.start <= other.start and other.end <= self.end

    def innermost_key(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Sort key: of nested spans, the innermost starts last and, at equal starts, ends first."""
        return (self.start, (-self.end[0], -self.end[1]))


def _span(node: ast.AST) -> _Span:
    """The source span of an ast node."""
    return _Span((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))


def _target_name(target: ast.expr, value: ast.expr | None, call: _Span | None) -> str | None:
    """The name bound by `target`; for tuples, the element fed by the call, else joined names."""
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Starred):
        return _target_name(target.value, None, call)
    if isinstance(target, ast.Subscript):
        return ast.unparse(target)
    if isinstance(target, (ast.Tuple, ast.List)):
        same_shape = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
        if same_shape and call is not None:
            for sub_target, sub_value in zip(target.elts, value.elts, strict=True):
                if _span(sub_value).contains(call):
                    return _target_name(sub_target, sub_value, call)
        names = [_target_name(elt, None, call) for elt in target.elts]
        return ",".join(name for name in names if name) or None
    return None


def _assignments(tree: ast.AST) -> list[tuple[_Span, ast.expr, ast.expr]]:
    """(value span, target, value) for every assignment-like node in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            found.append((_span(node.value), node.targets[0], node.value))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            found.append((_span(node.value), node.target, node.value))
    return found


_TREES: dict[tuple[str, int], list[tuple[_Span, ast.expr, ast.expr]] | None] = {}
_SITES: dict[tuple[CodeType, int], Site] = {}
_PARSE_LOCK = threading.Lock()


def _file_assignments(filename: str, module_globals: dict) -> list[tuple[_Span, ast.expr, ast.expr]] | None:
    """Parse `filename` once (cached by name and source hash); None if source is unavailable."""
    lines = linecache.getlines(filename, module_globals)
    if not lines:
        return None
    source = "".join(lines)
    key = (filename, hash(source))
    with _PARSE_LOCK:
        if key not in _TREES:
            try:
                _TREES[key] = _assignments(ast.parse(source, filename))
            except (SyntaxError, ValueError):
                _TREES[key] = None
        return _TREES[key]


def _call_span(frame: FrameType) -> _Span | None:
    """The span of the call expression the frame is executing; None if positions are absent."""
    try:
        pos = next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None))
    except (AttributeError, StopIteration):
        return None
    if None in pos:
        return None
    return _Span((pos[0], pos[2]), (pos[1], pos[3]))


def _site_name(frame: FrameType) -> str | None:
    """The assigned name of the innermost assignment whose value contains the current call."""
    assignments = _file_assignments(frame.f_code.co_filename, frame.f_globals)
    if not assignments:
        return None
    call = _call_span(frame)
    if call is None:  # only the line is known: match assignments by their line range
        line = frame.f_lineno
        holders = [a for a in assignments if a[0].start[0] <= line <= a[0].end[0]]
    else:
        holders = [a for a in assignments if a[0].contains(call)]
    if not holders:
        return None
    _, target, value = max(holders, key=lambda a: a[0].innermost_key())
    return _target_name(target, value, call)


def call_site(frame: FrameType) -> Site:
    """The `Site` of the call that `frame` is making now (cached per code object and offset)."""
    key = (frame.f_code, frame.f_lasti)
    site = _SITES.get(key)
    if site is None:
        code = frame.f_code
        function = getattr(code, "co_qualname", code.co_name)
        site = Site(code.co_filename, function, _site_name(frame))
        _SITES[key] = site
    return site


def clear_source_cache() -> None:
    """Forget parsed sources and resolved sites (for sources edited while the process runs)."""
    with _PARSE_LOCK:
        _TREES.clear()
        _SITES.clear()
    linecache.clearcache()
