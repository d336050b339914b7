"""Spy: records every call of a trainer module's `masked_mean` / `selective_log_softmax`.

Like pytest-mock's spy, the wrappers call the real function and return its result
unchanged; what went in and what came out is copied (detached, on CPU, float64 for
values, bool for masks, int64 for ids) into `Record`s. Each call site is named by the
variable its result is assigned to in the caller's source, found with `ast`.

torch is imported where it is used, so importing this module stays cheap.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import itertools
import linecache
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import CodeType, FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessConfigError

if TYPE_CHECKING:
    import torch

DEFAULT_FUNCTIONS = ("masked_mean", "selective_log_softmax")
ENTROPY_CHUNK_ELEMENTS = 1 << 22
"""Logit elements converted to float64 at once when computing entropies (32 MiB)."""


class SpyError(HarnessConfigError):
    """The spy cannot be installed as asked (missing function, nested spy on one module)."""


@dataclass(frozen=True)
class Site:
    """Where a spied function was called: file, function (qualified name), assigned name."""

    file: str
    function: str
    name: str | None


@dataclass
class Record:
    """One recorded call (or a boundary marker, `fn == "mark"`).

    masked_mean: tensors `values` (float64), `mask` (bool), `result` (float64); `axis`.
    selective_log_softmax: tensors `index` (int64), `logprobs` (float64), `entropy`
    (float64, per token). `dtype` is the dtype of the traced input (values or logits).
    """

    fn: str
    site: Site
    seq: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    axis: Any = None
    dtype: str | None = None
    label: str | None = None

    @property
    def name(self) -> str | None:
        """The call site's assigned name (the mark's label for a marker)."""
        return self.site.name

    def _tensor(self, key: str) -> torch.Tensor:
        """The recorded tensor `key`, or an AttributeError naming it."""
        try:
            return self.tensors[key]
        except KeyError:
            raise AttributeError(f"{self.fn} record #{self.seq} has no tensor {key!r}") from None

    values = property(lambda self: self._tensor("values"), doc="masked_mean values (float64).")
    mask = property(lambda self: self._tensor("mask"), doc="masked_mean mask (bool).")
    result = property(lambda self: self._tensor("result"), doc="masked_mean result (float64).")
    index = property(lambda self: self._tensor("index"), doc="Response token ids (int64).")
    logprobs = property(lambda self: self._tensor("logprobs"), doc="Returned log-probs (float64).")
    entropy = property(lambda self: self._tensor("entropy"), doc="Per-token entropy (float64).")


_SEQ = itertools.count()
_ACTIVE: dict[int, Spy] = {}
_ACTIVE_LOCK = threading.Lock()


# ---------------------------------------------------------------------------- call sites


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


# ---------------------------------------------------------------------------- tensor copies


def token_entropy(logits: torch.Tensor, chunk_elements: int = ENTROPY_CHUNK_ELEMENTS) -> torch.Tensor:
    """Per-position entropy of softmax(logits) over the last axis, float64 on CPU.

    Computed as `logsumexp(l) - sum(softmax(l) * l)` in float64, a few positions at a
    time, so that no float64 copy of the whole logits tensor is ever made.
    """
    import torch

    with torch.no_grad():
        flat = logits.detach().reshape(-1, logits.shape[-1])
        rows = max(1, chunk_elements // max(1, flat.shape[-1]))
        device = flat.device if flat.device.type != "mps" else torch.device("cpu")
        parts = []
        for start in range(0, flat.shape[0], rows):
            chunk = flat[start : start + rows].to(device=device, dtype=torch.float64)
            probs = torch.softmax(chunk, dim=-1)
            plogits = torch.where(probs > 0, probs * chunk, torch.zeros_like(chunk))
            parts.append((torch.logsumexp(chunk, dim=-1) - plogits.sum(dim=-1)).cpu())
        out = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return out.reshape(logits.shape[:-1])


def _copy(tensor: Any, dtype: torch.dtype) -> torch.Tensor:
    """A detached CPU copy of `tensor` (or of a Python number) in `dtype`."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        return torch.as_tensor(tensor, dtype=dtype)
    return tensor.detach().to(device="cpu", dtype=dtype, copy=True)


def _dtype_name(tensor: Any) -> str | None:
    """'float32' for a float32 tensor; None for non-tensors."""
    dtype = getattr(tensor, "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


@functools.lru_cache(maxsize=64)
def _signature(real: Callable) -> inspect.Signature:
    """The real function's signature, read once (the spy is on the trainer's hot path)."""
    return inspect.signature(real)


def _bind(real: Callable, args: tuple, kwargs: dict) -> list[Any]:
    """Positional view of a call: the arguments in the real function's parameter order."""
    try:
        bound = _signature(real).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return list(args)
    bound.apply_defaults()
    return list(bound.arguments.values())


def _masked_mean_fields(args: list[Any], result: Any) -> dict[str, Any]:
    """Record fields of a masked_mean(values, mask, axis) call."""
    import torch

    values, mask = args[0], args[1]
    axis = args[2] if len(args) > 2 else None
    tensors = {"values": _copy(values, torch.float64), "mask": _copy(mask, torch.bool)}
    tensors["result"] = _copy(result, torch.float64)
    return {"tensors": tensors, "axis": axis, "dtype": _dtype_name(values)}


def _log_softmax_fields(args: list[Any], result: Any) -> dict[str, Any]:
    """Record fields of a selective_log_softmax(logits, index) call; the logits are not kept."""
    import torch

    logits, index = args[0], args[1]
    tensors = {"index": _copy(index, torch.int64), "logprobs": _copy(result, torch.float64)}
    tensors["entropy"] = token_entropy(logits)
    return {"tensors": tensors, "dtype": _dtype_name(logits)}


_FIELDS: dict[str, Callable[[list[Any], Any], dict[str, Any]]] = {
    "masked_mean": _masked_mean_fields,
    "selective_log_softmax": _log_softmax_fields,
}


def _generic_fields(args: list[Any], result: Any) -> dict[str, Any]:
    """For other spied functions: the tensor arguments and result, as float64 copies."""
    import torch

    tensors = {f"arg{i}": _copy(a, torch.float64) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    if isinstance(result, torch.Tensor):
        tensors["result"] = _copy(result, torch.float64)
    return {"tensors": tensors}


# ---------------------------------------------------------------------------- the spy


class Spy:
    """Context manager that patches `module`'s functions with recording wrappers.

    >>> with Spy(trainer_module) as spy:          # doctest: +SKIP
    ...     run_training()
    >>> spy.calls("masked_mean", name="pg_loss")  # doctest: +SKIP
    """

    def __init__(self, module: ModuleType, functions: tuple[str, ...] = DEFAULT_FUNCTIONS) -> None:
        self.module = module
        self.functions = tuple(functions)
        self.records: list[Record] = []
        self._lock = threading.RLock()
        self._originals: dict[str, Callable] = {}
        self._paused = 0
        self._active = False

    def _check_module(self) -> None:
        """Raise SpyError unless the module has every function, callable."""
        name = getattr(self.module, "__name__", repr(self.module))
        for fn in self.functions:
            if not hasattr(self.module, fn):
                raise SpyError(f"cannot spy on module {name!r}: it has no function {fn!r}")
            if not callable(getattr(self.module, fn)):
                raise SpyError(f"cannot spy on module {name!r}: attribute {fn!r} is not callable")

    def __enter__(self) -> Spy:
        self._check_module()
        name = getattr(self.module, "__name__", repr(self.module))
        with _ACTIVE_LOCK:
            if self._active or id(self.module) in _ACTIVE:
                raise SpyError(f"module {name!r} is already being spied on; nested spies are refused")
            _ACTIVE[id(self.module)] = self
            self._active = True
        try:
            for fn in self.functions:
                real = getattr(self.module, fn)
                self._originals[fn] = real
                setattr(self.module, fn, self._wrap(fn, real))
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._restore()

    def _restore(self) -> None:
        """Put every original function back and release the module (idempotent)."""
        for fn, real in self._originals.items():
            setattr(self.module, fn, real)
        self._originals.clear()
        with _ACTIVE_LOCK:
            if _ACTIVE.get(id(self.module)) is self:
                del _ACTIVE[id(self.module)]
            self._active = False

    def _wrap(self, fn: str, real: Callable) -> Callable:
        """A wrapper that calls `real`, records the call, and returns the real result."""

        @functools.wraps(real)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            """Call the real function, record the call unless paused, return the real result."""
            result = real(*args, **kwargs)
            if self._paused == 0:
                self._record(fn, real, sys._getframe(1), args, kwargs, result)
            return result

        wrapper.__spy__ = self  # type: ignore[attr-defined]
        return wrapper

    def _record(self, fn: str, real: Callable, frame: FrameType, args: tuple, kwargs: dict, result: Any) -> None:
        """Append one `Record` for a finished call made from `frame`."""
        site = call_site(frame)
        try:
            fields = _FIELDS.get(fn, _generic_fields)(_bind(real, args, kwargs), result)
        except (TypeError, ValueError, RuntimeError, IndexError) as why:
            where = f"{site.file}:{site.function} ({site.name})"
            raise SpyError(f"cannot record the call of {fn} at {where}, not per the contract: {why}") from why
        with self._lock:
            self.records.append(Record(fn=fn, site=site, seq=next(_SEQ), **fields))

    def mark(self, label: str) -> Record:
        """Append a boundary marker (fn="mark"), e.g. between updates."""
        record = Record(fn="mark", site=Site("<mark>", "<mark>", label), seq=next(_SEQ), label=label)
        with self._lock:
            self.records.append(record)
        return record

    def calls(self, fn: str | None = None, name: str | None = None) -> list[Record]:
        """Records of function `fn` (any when None) at sites named `name` (any when None)."""
        with self._lock:
            return [r for r in self.records if (fn is None or r.fn == fn) and (name is None or r.site.name == name)]

    def clear(self) -> None:
        """Forget every record so far."""
        with self._lock:
            self.records.clear()

    @contextlib.contextmanager
    def paused(self) -> Iterator[Spy]:
        """Within this block, calls go to the real functions and nothing is recorded."""
        with self._lock:
            self._paused += 1
        try:
            yield self
        finally:
            with self._lock:
                self._paused -= 1


def spy_on(module: ModuleType, functions: tuple[str, ...] = DEFAULT_FUNCTIONS) -> Spy:
    """A `Spy` over `module` (use it as a context manager)."""
    return Spy(module, functions)
