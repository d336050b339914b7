"""Spy: records every call of a trainer module's `masked_mean` / `selective_log_softmax`.

Like pytest-mock's spy, the wrappers call the real function and return its result
unchanged; what went in and what came out is copied (detached, on CPU, float64 for
values, bool for masks, int64 for ids) into a frozen record (`records.py`). Which record
a call makes is data: `RECORDERS` maps a function name to the function that builds its
record; other spied functions get an `OtherCall`. Each call site is named by the variable
its result is assigned to (`callsite.py`).

torch is imported where it is used, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from harness.errors import ContractViolation, HarnessConfigError

from .callsite import call_site
from .records import LogProbCall, Mark, MaskedMeanCall, OtherCall, Record, Site, ValueHeadCall
from .tensors import _copy, _dtype_name, logprob_gap, reduce_logits, token_entropy  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    pass

DEFAULT_FUNCTIONS = ("masked_mean", "selective_log_softmax")
_SEQ = itertools.count()
_ACTIVE: dict[int, Spy] = {}
_ACTIVE_LOCK = threading.Lock()


class SpyError(HarnessConfigError):
    """The spy cannot be installed as asked (missing function, nested spy on one module)."""


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


Recorder = Callable[[Site, int, list[Any], Any], Record]
"""(site, seq, the call's arguments in parameter order, its result) -> the call's record."""


def record_masked_mean(site: Site, seq: int, args: list[Any], result: Any) -> MaskedMeanCall:
    """The record of a masked_mean(values, mask, axis) call."""
    import torch

    values, mask = args[0], args[1]
    axis = args[2] if len(args) > 2 else None
    return MaskedMeanCall(
        site,
        seq,
        values=_copy(values, torch.float64),
        mask=_copy(mask, torch.bool),
        result=_copy(result, torch.float64),
        axis=axis,
        dtype=_dtype_name(values),
    )


def record_log_softmax(site: Site, seq: int, args: list[Any], result: Any) -> LogProbCall:
    """The record of a selective_log_softmax(logits, index) call; the logits are reduced, in one pass, to
    per-token entropies and to the gap between the returned log-probs and log_softmax(logits)[index]."""
    import torch

    logits, index = args[0], args[1]
    entropy, gap, spread = reduce_logits(logits, index, result)
    return LogProbCall(
        site,
        seq,
        index=_copy(index, torch.int64),
        logprobs=_copy(result, torch.float64),
        entropy=entropy,
        logprob_gap=gap,
        logprob_variance=spread,
        dtype=_dtype_name(logits),
    )


RECORDERS: Mapping[str, Recorder] = {
    "masked_mean": record_masked_mean,
    "selective_log_softmax": record_log_softmax,
}


def recorder_for(fn: str) -> Recorder:
    """The recorder of `fn`; for other spied functions, one that keeps the tensor arguments and result."""
    if fn in RECORDERS:
        return RECORDERS[fn]

    def record_other(site: Site, seq: int, args: list[Any], result: Any) -> OtherCall:
        """Tensor arguments (`arg0`, ...) and the result, as float64 copies."""
        import torch

        tensors = {f"arg{i}": _copy(a, torch.float64) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        if isinstance(result, torch.Tensor):
            tensors["result"] = _copy(result, torch.float64)
        return OtherCall(site, seq, function=fn, tensors=tensors)

    return record_other


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
        self.recorders = {fn: recorder_for(fn) for fn in self.functions}
        self.records: list[Record] = []
        self._lock = threading.RLock()
        self._originals: dict[str, Callable] = {}
        self._paused = 0
        self._active = False
        self._grads: dict[int, Any] = {}

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
        """Append the record of a finished call made from `frame`."""
        site = call_site(frame)
        try:
            record = self.recorders[fn](site, -1, _bind(real, args, kwargs), result)
        except (TypeError, ValueError, RuntimeError, IndexError) as why:
            where = f"{site.file}:{site.function} ({site.name})"
            raise ContractViolation(f"cannot record the call of {fn} at {where}, not per the contract: {why}") from why
        with self._lock:  # numbered as appended, so that call order and list order agree across threads
            record = dataclasses.replace(record, seq=next(_SEQ))
            self.records.append(record)
        if isinstance(record, LogProbCall) and getattr(result, "requires_grad", False):
            result.register_hook(self._grad_hook(record.seq))

    def _grad_hook(self, seq: int) -> Callable:
        """A tensor hook that adds each backward's gradient at the returned log-probs to `seq`'s total."""
        import torch

        def hook(grad: Any) -> None:
            g = grad.detach().to("cpu", torch.float64)
            with self._lock:
                self._grads[seq] = g if seq not in self._grads else self._grads[seq] + g

        return hook

    def finished(self) -> list[Record]:
        """The records, each log-prob record (and value-head output) with the gradient its backward passes
        brought to it."""
        with self._lock:
            return [_with_grad(r, self._grads[r.seq]) if r.seq in self._grads else r for r in self.records]

    def watch_grad(self, tensor: Any, record: Record) -> None:
        """Add every backward's gradient at the live `tensor` to `record`'s total (see `finished`)."""
        tensor.register_hook(self._grad_hook(record.seq))

    def add(self, record: Record) -> Record | None:
        """Append a record made outside the wrapped functions (e.g. by a module hook), numbered in call order, and
        return it as numbered; nothing is kept (None) while the spy is paused."""
        with self._lock:
            if self._paused:
                return None
            numbered = dataclasses.replace(record, seq=next(_SEQ))
            self.records.append(numbered)
            return numbered

    def mark(self, label: str) -> Mark:
        """Append a boundary marker, e.g. between updates."""
        with self._lock:
            record = Mark(Site("<mark>", "<mark>", label), next(_SEQ), label=label)
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
            self._grads.clear()

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


def _with_grad(record: Record, grad: Any) -> Record:
    """`record` with the gradient its backward passes brought: a value-head output's `dvalues`, else `grad`."""
    if isinstance(record, ValueHeadCall):
        return dataclasses.replace(record, dvalues=grad)
    return dataclasses.replace(record, grad=grad)


def spy_on(module: ModuleType, functions: tuple[str, ...] = DEFAULT_FUNCTIONS) -> Spy:
    """A `Spy` over `module` (use it as a context manager)."""
    return Spy(module, functions)
