"""The records the spy makes: one frozen value per call (or boundary mark), typed by what was called.

Tensors are detached CPU copies: float64 for values, bool for masks, int64 for ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Site:
    """Where a spied function was called: file, function (qualified name), assigned name."""

    file: str
    function: str
    name: str | None


@dataclass(frozen=True)
class Record:
    """What every record has: its call site and its place in call order (`seq`)."""

    fn: ClassVar[str] = ""
    site: Site
    seq: int

    @property
    def name(self) -> str | None:
        """The call site's assigned name."""
        return self.site.name


@dataclass(frozen=True)
class MaskedMeanCall(Record):
    """A `masked_mean(values, mask, axis)` call: the per-token values, the mask, the result."""

    fn: ClassVar[str] = "masked_mean"
    values: torch.Tensor = field(repr=False, default=None)
    mask: torch.Tensor = field(repr=False, default=None)
    result: torch.Tensor = field(repr=False, default=None)
    axis: Any = None
    dtype: str | None = None
    """The dtype of the traced `values`."""


@dataclass(frozen=True)
class LogProbCall(Record):
    """A `selective_log_softmax(logits, index)` call: response ids, returned log-probs, per-token entropy.

    The `(B, T, V)` logits are never kept: the spy reduces them to the entropy at record time.
    """

    fn: ClassVar[str] = "selective_log_softmax"
    index: torch.Tensor = field(repr=False, default=None)
    logprobs: torch.Tensor = field(repr=False, default=None)
    entropy: torch.Tensor = field(repr=False, default=None)
    dtype: str | None = None
    """The dtype of the traced logits."""
    logprob_gap: torch.Tensor | None = field(repr=False, default=None)
    """|logprobs - log_softmax(logits)[index]| per position, from the call's own inputs (None if not taken)."""
    logprob_variance: torch.Tensor | None = field(repr=False, default=None)
    """Per position, the variance of log softmax(logits) under softmax(logits): how far a drawn token's
    log-prob strays from minus the entropy (None if not taken)."""
    grad: torch.Tensor | None = field(repr=False, default=None)
    """d(loss)/d(returned log-probs) per position, summed over every backward pass through the returned tensor
    (float64; None when it did not require grad or no backward reached it)."""


@dataclass(frozen=True)
class OtherCall(Record):
    """A call of any other spied function: its tensor arguments (`arg0`, ...) and `result`, as float64."""

    function: str = ""
    tensors: Mapping[str, torch.Tensor] = field(repr=False, default_factory=dict)

    @property
    def fn(self) -> str:  # type: ignore[override]
        """The spied function's name."""
        return self.function


@dataclass(frozen=True)
class Mark(Record):
    """A boundary marker a test drops between updates (`Spy.mark`); it records no call."""

    fn: ClassVar[str] = "mark"
    label: str | None = None


@dataclass(frozen=True)
class ValueHeadCall(Record):
    """One forward of the value model's head (the module a run exposes as `value_head`): its output per position.

    `values` is the whole (B, L) output, prompt positions included (a trailing axis of 1 is
    dropped); the oracle picks the response positions. `grad` says whether autograd was on:
    off for the rollout's old values, on for a training micro-batch's new ones. `dvalues` is the gradient
    the backward passes brought to the live output, dL/d(output) in the output's shape (float64; None when
    autograd was off or no backward reached it).
    """

    fn: ClassVar[str] = "value_head"
    values: torch.Tensor = field(repr=False, default=None)
    grad: bool = False
    dtype: str | None = None
    """The dtype of the head's output."""
    dvalues: torch.Tensor | None = field(repr=False, default=None)


@dataclass(frozen=True)
class RewardHeadCall(Record):
    """One forward of the reward model's scalar head (a run's `reward_model`): its output per position, and the
    token ids and attention mask its backbone was called with, which tell the scored rows apart.

    `values` is the whole (B, L) output (a trailing axis of 1 dropped); `input_ids` and `attention_mask` are
    the (B, L) inputs of the forward that made it (None when the backbone was not called with them: the oracle
    then cannot pair the rows, and says so). The oracle picks each row's scoring position itself.
    """

    fn: ClassVar[str] = "reward_head"
    values: torch.Tensor = field(repr=False, default=None)
    input_ids: torch.Tensor | None = field(repr=False, default=None)
    attention_mask: torch.Tensor | None = field(repr=False, default=None)
    dtype: str | None = None
    """The dtype of the head's output."""
