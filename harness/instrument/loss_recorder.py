"""`LossRecorder`: one frozen `LossRecord` per call of a trainer's loss entry point, made while the trainer runs.

Used as a context around the run (`with recorder: trainer.train()`), it replaces, and on leaving
always puts back:

- the loss entry point, a method of the trainer object (`loss`, e.g. the reference's `micro_step`,
  TRL's `_compute_loss`): each call of it is one micro-batch. After the call returns, the target's
  `fields(*args, **kwargs)` gives the record's fields that the call's arguments determine (its
  generation, window, rank, mask, advantages, old and reference log-probs, completions and ids);
  the recorder copies each tensor to the CPU in its record dtype (`LossRecord.DTYPES`);
- the functions that compute the log-probs and entropies, which the trainer looks up at call time (`logits`:
  `(owner, name, kind)` each; by default the module-level `selective_log_softmax` and `entropy_from_logits` of
  the trainer's module). Inside a loss call, each call's result is compared with its float64 recomputation from
  what it was given (`logit_gaps`, logits.py: `kind` is "log_softmax" or "entropy" for those two, "joint" for a
  `selective_log_softmax_and_entropy(logits, index, ...)`, "head" for a fused LM head's
  `(hidden, weight, bias, targets, temperature, ...)`), and, unless `outputs` names a method, the first result of
  each is the record's `logps` and `entropies` (a "head" records no values of its own: it needs `outputs`);
  outside a loss call they only call through;
- `outputs`, when given: a method of the trainer that returns `(logps, entropies)` inside the loss (TRL's
  `_get_per_token_logps_and_entropies`), which must run exactly once per recorded loss call;
- whatever the target adds with `around` (counters of its generations and windows).

A hook on the log-probs tensor keeps the gradient the micro-batch's backward pass delivers to it
(`logp_grad`), and one on the entropies, where the loss was built from them, the gradient at them (`entropy_grad`),
which may arrive after the loss call returns: `records` freezes the micro-batches seen
so far when asked, after the run. Every wrapper returns what the wrapped function returned.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .logits import LogitGaps
from .loss import LogitGapRecord, LossRecord
from .tensors import _copy, _dtype_name

_ABSENT = object()


@dataclass
class _Draft:
    """One recorded micro-batch until it is frozen: its copies, and its gradient when the backward pass brings it."""

    logps: torch.Tensor | None = None
    entropies: torch.Tensor | None = None
    outputs_calls: int = 0
    logit_gaps: LogitGapRecord | None = None
    logp_grad: torch.Tensor | None = None
    entropy_grad: torch.Tensor | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    """The dtype of each tensor as the trainer held it, before its float64 copy (`LossRecord.held`)."""
    faults: list[str] | None = None
    """Where the recorder is tolerant: the list its failures go to (the gradient hook's included), else None."""

    def keep_logps(self, logps: torch.Tensor) -> None:
        """Copy the log-probs of the loss, and hook the gradient that will reach them."""
        self.hold("logps", logps)
        self.logps = _copy(logps, torch.float64)
        if logps.requires_grad:
            logps.register_hook(self._keep_grad)

    def _keep_grad(self, grad: torch.Tensor, name: str = "logp_grad", what: str = "the log-probs") -> None:
        try:
            setattr(self, name, _copy(grad, torch.float64))
        except Exception as why:
            if self.faults is None:
                raise
            self.faults.append(f"copying the gradient at {what}: {type(why).__name__}: {why}")

    def hold(self, name: str, value: Any) -> None:
        """Note the dtype `value` (a field `name` of the record) was held in, when it is a tensor."""
        dtype = _dtype_name(value)
        if dtype is not None:
            self.held[name] = dtype

    def keep_entropies(self, entropies: Any) -> None:
        """Copy the per-token entropies of the loss, and hook the gradient that will reach them (an entropy bonus)."""
        self.hold("entropies", entropies)
        self.entropies = _copy(entropies, torch.float64)
        if getattr(entropies, "requires_grad", False):
            entropies.register_hook(lambda grad: self._keep_grad(grad, "entropy_grad", "the entropies"))

    def frozen(self) -> LossRecord:
        return LossRecord(**self.fields, logps=self.logps, entropies=self.entropies, logit_gaps=self.logit_gaps,
                          logp_grad=self.logp_grad, entropy_grad=self.entropy_grad, held=dict(self.held))  # fmt: skip


KINDS = ("log_softmax", "entropy", "joint", "head")
"""What a function of `logits` computes (module docstring)."""


@dataclass
class _Live:
    """The loss call running now: its draft and the gap-keeping wrappers of the functions of `logits`, in order."""

    draft: _Draft
    calls: list[Callable]
    gaps: LogitGaps


def _gap_wrappers(gaps: LogitGaps, kinds: Sequence[str], originals: Sequence[Callable]) -> list[Callable]:
    """`gaps`' wrappers of the functions `originals`, each as its kind says."""
    pair = {}
    if "log_softmax" in kinds or "entropy" in kinds:
        take = lambda kind: originals[kinds.index(kind)] if kind in kinds else None  # noqa: E731
        pair = dict(zip(("log_softmax", "entropy"), gaps.wrap(take("log_softmax"), take("entropy"))))
    made = {"joint": gaps.wrap_joint, "head": gaps.wrap_head}
    return [pair[kind] if kind in pair else made[kind](original) for kind, original in zip(kinds, originals)]


class LossRecorder:
    """Records every call of `owner.<loss>` as a `LossRecord` (module docstring); `records` are the frozen ones."""

    def __init__(
        self,
        owner: Any,
        loss: str,
        module: types.ModuleType,
        fields: Callable[..., Mapping[str, Any]],
        *,
        outputs: str | None = None,
        keep: Callable[[], bool] | None = None,
        logits: Sequence[tuple[Any, str, str]] | None = None,
        tolerant: bool = False,
    ) -> None:
        """`keep()`, asked after each loss call: whether to record it (e.g. only in training mode; default: all).
        `logits`: the functions compared with their float64 formulas, `(owner, name, kind)` each (module
        docstring; default: `module`'s `selective_log_softmax` and `entropy_from_logits`). `tolerant` (live mode):
        an error of the recorder's own (copying, checking a record) never reaches the trainer: it goes to
        `faults` and the micro-batch is not recorded; the trainer's own errors still propagate."""
        self.owner, self.loss, self.module, self.fields = owner, loss, module, fields
        self.outputs, self.keep = outputs, keep
        if logits is None:
            logits = ((module, "selective_log_softmax", "log_softmax"), (module, "entropy_from_logits", "entropy"))
        self.logits = tuple(logits)
        kinds = [kind for _, _, kind in self.logits]
        unknown = [kind for kind in kinds if kind not in KINDS]
        if unknown or len(set(kinds)) != len(kinds):
            raise ValueError(f"logits: kinds {kinds}, each one of {', '.join(KINDS)} at most once")
        if "head" in kinds and outputs is None:
            raise ValueError("a fused head's outputs are not the loss's log-probs: name the method that returns them")
        self._drafts: list[_Draft] = []
        self.faults: list[str] | None = [] if tolerant else None
        """The recorder's own failures while tolerant (None when not tolerant: they raise)."""
        self._live: _Live | None = None
        self._extra: list[tuple[Any, str, Callable[[Callable], Callable]]] = []
        self._undo: list[tuple[Any, str, Any]] | None = None

    def around(self, owner: Any, name: str, wrap: Callable[[Callable], Callable]) -> None:
        """While installed, `owner.<name>` is `wrap(what it was)` too."""
        self._extra.append((owner, name, wrap))

    @property
    def records(self) -> tuple[LossRecord, ...]:
        """One frozen record per recorded loss call so far, in the order they ran."""
        return tuple(draft.frozen() for draft in self._drafts)

    def checked_records(self) -> tuple[LossRecord, ...]:
        """`records`, or RuntimeError naming the first of the recorder's own faults while tolerant (the records
        of a recording that failed part-way are not the interval's)."""
        if self.faults:
            raise RuntimeError(f"recording failed ({len(self.faults)}x): {self.faults[0]}")
        return self.records

    def __enter__(self) -> LossRecorder:
        if self._undo is not None:
            raise RuntimeError("this LossRecorder is already installed")
        self._undo = []
        try:
            originals = [getattr(owner, name) for owner, name, _ in self.logits]
            for place, (owner, name, kind) in enumerate(self.logits):
                self._replace(owner, name, lambda original, place=place, kind=kind: self._site(original, place, kind))
            if self.outputs is not None:
                self._replace(self.owner, self.outputs, self._outputs)
            self._replace(self.owner, self.loss, lambda loss: self._loss(loss, originals))
            for owner, name, wrap in self._extra:
                self._replace(owner, name, wrap)
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._restore()

    def _replace(self, owner: Any, name: str, wrap: Callable[[Callable], Callable]) -> None:
        previous = getattr(owner, "__dict__", {}).get(name, _ABSENT)
        setattr(owner, name, wrap(getattr(owner, name)))
        self._undo.append((owner, name, previous))

    def _restore(self) -> None:
        undo, self._undo, self._live = self._undo or [], None, None
        for owner, name, previous in reversed(undo):
            if previous is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)

    def _loss(self, loss: Callable, originals: Sequence[Callable]) -> Callable:
        kinds = [kind for _, _, kind in self.logits]

        def recorded_loss(*args, **kwargs):
            gaps = LogitGaps()
            live = self._live = _Live(_Draft(faults=self.faults), _gap_wrappers(gaps, kinds, originals), gaps)
            try:
                result = loss(*args, **kwargs)
            finally:
                self._live = None
            self._guard("recording a micro-batch", lambda: (self.keep is None or self.keep()) and
                        self._keep(live, args, kwargs))  # fmt: skip
            return result

        return recorded_loss

    def _guard(self, what: str, action: Callable[[], Any]) -> None:
        """Run the recorder's own `action`; while tolerant, a failure goes to `faults` instead of the trainer."""
        if self.faults is None:
            action()
            return
        try:
            action()
        except Exception as why:  # noqa: BLE001 - live mode: the trainer never meets the recorder's errors
            self.faults.append(f"{what}: {type(why).__name__}: {why}")

    def _keep(self, live: _Live, args: tuple, kwargs: dict) -> None:
        draft = live.draft
        if self.outputs is not None and draft.outputs_calls != 1:
            raise RuntimeError(
                f"{type(self.owner).__name__}.{self.loss} computed its log-probs {draft.outputs_calls} times in one "
                f"micro-batch ({self.outputs}), not once"
            )
        draft.logit_gaps = live.gaps.record()
        given = self.fields(*args, **kwargs)
        for name, value in given.items():
            if name in LossRecord.DTYPES:
                draft.hold(name, value)
        draft.fields = {name: self._copied(name, value) for name, value in given.items()}
        self._drafts.append(draft)

    @staticmethod
    def _copied(name: str, value: Any) -> Any:
        dtype = LossRecord.DTYPES.get(name)
        return value if dtype is None else _copy(value, getattr(torch, dtype))

    def _site(self, original: Callable, place: int, kind: str) -> Callable:
        def recorded_function(*args, **kwargs):
            live = self._live
            if live is None:
                return original(*args, **kwargs)
            out = live.calls[place](*args, **kwargs)
            if self.outputs is None:
                self._guard("copying the log-probs and entropies", lambda: self._keep_site(live.draft, kind, out))
            return out

        recorded_function.__name__ = getattr(original, "__name__", kind)
        return recorded_function

    @staticmethod
    def _keep_site(draft: _Draft, kind: str, out: Any) -> None:
        split = {"log_softmax": lambda: (out, None), "entropy": lambda: (None, out)}
        logps, entropies = split.get(kind, lambda: out[:2])()
        if logps is not None and draft.logps is None:
            draft.keep_logps(logps)
        if entropies is not None and draft.entropies is None:
            draft.keep_entropies(entropies)

    def _outputs(self, method: Callable) -> Callable:
        def recorded_outputs(*args, **kwargs):
            out = method(*args, **kwargs)
            live = self._live
            if live is not None:
                live.draft.outputs_calls += 1
                self._guard("copying the log-probs and entropies",
                            lambda: (live.draft.keep_logps(out[0]), live.draft.keep_entropies(out[1])))  # fmt: skip
            return out

        return recorded_outputs
