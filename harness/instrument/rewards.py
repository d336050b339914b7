"""Records what the reward model's head outputs per position, and the token ids of the rows it scored.

A run may have a `reward_model: nn.Module`, a sequence-classification model in the shape
transformers gives them: a backbone (the attribute `base_model_prefix` names, e.g. `model`)
that takes `input_ids` and `attention_mask`, and a scalar head `score` applied to its hidden
states. A forward pre-hook on the backbone keeps the ids and the mask of each call; a forward
hook on the head turns its output, (B, L) or (B, L, 1), into a `RewardHeadCall` with them,
numbered in the spy's call order. A trainer may call the backbone and the head itself (as
TRL's `get_reward` does) or the whole model: both pass through the two modules. Which
position of each row is the score is the oracle's business (`algorithms/ppo/oracle/scores.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.errors import HarnessConfigError

from .records import RewardHeadCall, Site
from .tensors import _copy, _dtype_name

if TYPE_CHECKING:
    import torch

    from .spy import Spy

REWARD_SITE = Site("<reward_model>", "reward_model", "reward_head")
HEAD = "score"
"""The attribute of the scalar head (transformers' sequence-classification models name it so)."""


def parts(model: Any) -> tuple[Any, Any]:
    """(the module called with the token ids, the scalar head) of a reward model; HarnessConfigError otherwise."""
    head = getattr(model, HEAD, None)
    if head is None or not hasattr(head, "register_forward_hook"):
        raise HarnessConfigError(
            f"reward_model {type(model).__name__} has no scalar head module `{HEAD}` to record (docs/architecture.md)"
        )
    prefix = getattr(model, "base_model_prefix", None)
    backbone = getattr(model, prefix, None) if isinstance(prefix, str) and prefix else None
    return (backbone if backbone is not None else model), head


def _argument(name: str, position: int, args: tuple, kwargs: dict) -> Any:
    """A forward argument passed by keyword or by position."""
    return kwargs[name] if name in kwargs else (args[position] if len(args) > position else None)


class RewardRecorder:
    """Context manager: hooks on a reward model that add a `RewardHeadCall` to `spy` for every head forward."""

    def __init__(self, model: torch.nn.Module, spy: Spy) -> None:
        self.backbone, self.head = parts(model)
        self.spy = spy
        self._inputs: tuple[Any, Any] | None = None
        self._handles: list[Any] = []

    def __enter__(self) -> RewardRecorder:
        self._handles = [
            self.backbone.register_forward_pre_hook(self._keep_inputs, with_kwargs=True),
            self.head.register_forward_hook(self._record),
        ]
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._inputs = None

    def _keep_inputs(self, module: Any, args: tuple, kwargs: dict) -> None:
        """Keep the ids and mask of the backbone's call until the head's output arrives."""
        self._inputs = (_argument("input_ids", 0, args, kwargs), _argument("attention_mask", 1, args, kwargs))

    def _record(self, module: Any, args: Any, output: Any) -> None:
        """One head forward: its output per position with the inputs kept (None when none were seen)."""
        import torch

        live = output[0] if isinstance(output, tuple) else output
        if not isinstance(live, torch.Tensor):
            return
        values = live.detach()
        if values.dim() == 3 and values.shape[-1] == 1:
            values = values.squeeze(-1)
        ids, mask = self._inputs if self._inputs is not None else (None, None)
        self._inputs = None
        record = RewardHeadCall(
            REWARD_SITE,
            -1,
            values=_copy(values, torch.float64),
            input_ids=_copy(ids, torch.int64) if isinstance(ids, torch.Tensor) else None,
            attention_mask=_copy(mask, torch.bool) if isinstance(mask, torch.Tensor) else None,
            dtype=_dtype_name(live),
        )
        self.spy.add(record)
