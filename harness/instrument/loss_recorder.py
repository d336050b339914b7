"""`LossRecorder`: one frozen `LossRecord` per call of a trainer's loss entry point, made while the trainer runs.

Used as a context around the run (`with recorder: trainer.train()`), it replaces, and on leaving
always puts back:

- the loss entry point, a method of the trainer object (`loss`, e.g. the reference's `micro_step`,
  TRL's `_compute_loss`): each call of it is one micro-batch. After the call returns, the target's
  `fields(*args, **kwargs)` gives the record's fields that the call's arguments determine (its
  generation, window, rank, mask, advantages, old and reference log-probs, completions and ids);
  the recorder copies each tensor to the CPU in its record dtype (`LossRecord.DTYPES`);
- the module-level `selective_log_softmax` and `entropy_from_logits` of the trainer's module, which
  the trainer looks up at call time: inside a loss call, each call's result is compared with its float64
  recomputation from the logits (`logit_gaps`, logits.py), and, unless `outputs` names a method, the first
  result of each is the record's `logps` and `entropies`; outside a loss call they only call through;
- `outputs`, when given: a method of the trainer that returns `(logps, entropies)` inside the loss (TRL's
  `_get_per_token_logps_and_entropies`), which must run exactly once per recorded loss call;
- whatever the target adds with `around` (counters of its generations and windows).

A hook on the log-probs tensor keeps the gradient the micro-batch's backward pass delivers to it
(`logp_grad`), which may arrive after the loss call returns: `records` freezes the micro-batches seen
so far when asked, after the run. Every wrapper returns what the wrapped function returned.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .logits import LogitGaps
from .loss import LogitGapRecord, LossRecord
from .tensors import _copy

_ABSENT = object()


@dataclass
class _Draft:
    """One recorded micro-batch until it is frozen: its copies, and its gradient when the backward pass brings it."""

    logps: torch.Tensor | None = None
    entropies: torch.Tensor | None = None
    outputs_calls: int = 0
    logit_gaps: LogitGapRecord | None = None
    logp_grad: torch.Tensor | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def keep_logps(self, logps: torch.Tensor) -> None:
        """Copy the log-probs of the loss, and hook the gradient that will reach them."""
        self.logps = _copy(logps, torch.float64)
        if logps.requires_grad:
            logps.register_hook(self._keep_grad)

    def _keep_grad(self, grad: torch.Tensor) -> None:
        self.logp_grad = _copy(grad, torch.float64)

    def frozen(self) -> LossRecord:
        return LossRecord(**self.fields, logps=self.logps, entropies=self.entropies, logit_gaps=self.logit_gaps,
                          logp_grad=self.logp_grad)  # fmt: skip


@dataclass
class _Live:
    """The loss call running now: its draft and the gap-keeping wrappers of the module's two functions."""

    draft: _Draft
    log_softmax: Callable
    entropy: Callable
    gaps: LogitGaps


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
    ) -> None:
        """`keep()`, asked after each loss call: whether to record it (e.g. only in training mode; default: all)."""
        self.owner, self.loss, self.module, self.fields = owner, loss, module, fields
        self.outputs, self.keep = outputs, keep
        self._drafts: list[_Draft] = []
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

    def __enter__(self) -> LossRecorder:
        if self._undo is not None:
            raise RuntimeError("this LossRecorder is already installed")
        self._undo = []
        try:
            originals = (self.module.selective_log_softmax, self.module.entropy_from_logits)
            self._replace(self.module, "selective_log_softmax", self._log_softmax)
            self._replace(self.module, "entropy_from_logits", self._entropy)
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

    def _loss(self, loss: Callable, originals: tuple[Callable, Callable]) -> Callable:
        def recorded_loss(*args, **kwargs):
            gaps = LogitGaps()
            live = self._live = _Live(_Draft(), *gaps.wrap(*originals), gaps)
            try:
                result = loss(*args, **kwargs)
            finally:
                self._live = None
            if self.keep is None or self.keep():
                self._keep(live, args, kwargs)
            return result

        return recorded_loss

    def _keep(self, live: _Live, args: tuple, kwargs: dict) -> None:
        draft = live.draft
        if self.outputs is not None and draft.outputs_calls != 1:
            raise RuntimeError(
                f"{type(self.owner).__name__}.{self.loss} computed its log-probs {draft.outputs_calls} times in one "
                f"micro-batch ({self.outputs}), not once"
            )
        draft.logit_gaps = live.gaps.record()
        draft.fields = {name: self._copied(name, value) for name, value in self.fields(*args, **kwargs).items()}
        self._drafts.append(draft)

    @staticmethod
    def _copied(name: str, value: Any) -> Any:
        dtype = LossRecord.DTYPES.get(name)
        return value if dtype is None else _copy(value, getattr(torch, dtype))

    def _log_softmax(self, original: Callable) -> Callable:
        def selective_log_softmax(logits, index):
            live = self._live
            if live is None:
                return original(logits, index)
            out = live.log_softmax(logits, index)
            if self.outputs is None and live.draft.logps is None:
                live.draft.keep_logps(out)
            return out

        return selective_log_softmax

    def _entropy(self, original: Callable) -> Callable:
        def entropy_from_logits(logits):
            live = self._live
            if live is None:
                return original(logits)
            out = live.entropy(logits)
            if self.outputs is None and live.draft.entropies is None:
                live.draft.entropies = _copy(out, torch.float64)
            return out

        return entropy_from_logits

    def _outputs(self, method: Callable) -> Callable:
        def recorded_outputs(*args, **kwargs):
            out = method(*args, **kwargs)
            live = self._live
            if live is not None:
                live.draft.outputs_calls += 1
                live.draft.keep_logps(out[0])
                live.draft.entropies = _copy(out[1], torch.float64)
            return out

        return recorded_outputs
