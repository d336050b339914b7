"""Records what the value model's head outputs, through a forward hook on the module a run exposes.

A run may have a `value_head: nn.Module` (e.g. the `score` layer of a sequence-classification
value model) whose forward output is the value per position, (B, L) or (B, L, 1). Each forward
becomes a `ValueHeadCall` in the spy's records, numbered in the same call order as the spied
functions, so that the view can tell the rollout's old values (autograd off) from a training
micro-batch's new ones (autograd on) and pair them with rows. Nothing of the trainer is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .records import Site, ValueHeadCall
from .tensors import _copy, _dtype_name

if TYPE_CHECKING:
    import torch

    from .spy import Spy

VALUE_SITE = Site("<value_head>", "value_head", "value_head")


class ValueRecorder:
    """Context manager: a forward hook on `head` that adds a `ValueHeadCall` to `spy` for every forward."""

    def __init__(self, head: torch.nn.Module, spy: Spy) -> None:
        self.head, self.spy = head, spy
        self._handle = None

    def __enter__(self) -> ValueRecorder:
        self._handle = self.head.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        """Record one forward's output; the live tensor is handed to `on_output` first. A training forward's
        record (autograd on) gets the gradient the backward passes bring to the live output (`dvalues`)."""
        import torch

        live = output[0] if isinstance(output, tuple) else output
        if not isinstance(live, torch.Tensor):
            return
        self.on_output(live)
        values = live.detach()
        if values.dim() == 3 and values.shape[-1] == 1:
            values = values.squeeze(-1)
        grad = torch.is_grad_enabled() and live.requires_grad
        record = ValueHeadCall(VALUE_SITE, -1, values=_copy(values, torch.float64), grad=grad, dtype=_dtype_name(live))
        numbered = self.spy.add(record)
        if grad and numbered is not None:
            self.spy.watch_grad(live, numbered)

    def on_output(self, live: torch.Tensor) -> None:
        """The head's live output, before it is recorded (a place for a subclass to look at it)."""
