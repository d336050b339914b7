"""What the gradient recorder (grad.py) saw, frozen: each optimizer step's summaries, and its `.grad` copy when kept.

A run recorded without the copies keeps each step's summaries only: reading `Step.grad` or `Step.local_grad` from
it raises `GradCopiesNotKept`. A run recorded with them also keeps, per step, what the step did to the weights
(`StepUpdate`: the weights before and after it, the optimizer's settings and step counts), which the optimizer
step's recomputation reads (harness/oracle/optimizer.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class GradCopiesNotKept(RuntimeError):
    """A check read a step's `.grad` copy from a run recorded without the copies (a harness bug, never a pass)."""


NOT_KEPT = (
    "this run's gradient trace kept no .grad copies: a check that reads them must get its runs inside "
    "harness.instrument.observe.grad_copies()"
)


def _kept(tensors):
    """`tensors`, or GradCopiesNotKept when the step kept none (None)."""
    if tensors is None:
        raise GradCopiesNotKept(NOT_KEPT)
    return tensors


@dataclass(frozen=True)
class Step:
    """One real optimizer step: when it ran, the backward passes it saw, and the gradient it applied."""

    clock: int
    backward_ids: list[int]
    grads: list[torch.Tensor] | None
    """Per-parameter copies of `.grad` at the step (flattened to float64 only when asked for); None when the
    recorder kept no copies."""
    unexplained: float
    """Relative size of .grad minus the contributions since the last step (0 when every one is there)."""
    raw_norm: float = 0.0
    """Global L2 norm of the sum of the contributions since the last step (what clipping measures)."""
    applied_norm: float = 0.0
    """Global L2 norm of .grad at the step (what the optimizer applies)."""
    coefficient: float = 1.0
    """The scalar c that best explains .grad as c * (sum of contributions): 1 unclipped, <= 1 clipped."""
    residual: float = 0.0
    """|.grad - c * sum| / |.grad|: what no rescaling of the contributions explains (0 when clipping is all)."""
    nonfinite_grads: int = 0
    """Parameter tensors whose .grad holds a NaN or an inf at the step."""
    local: tuple[torch.Tensor, ...] | None = ()
    """Per-parameter sums of this process's backward contributions since the last step (the same tensors as
    `grads` where they equal .grad; they differ where data parallelism reduced .grad across processes); None
    when the recorder kept no copies."""

    @property
    def copies(self) -> bool:
        """Whether the step kept its `.grad` copy (`grad` and `local_grad` raise GradCopiesNotKept when not)."""
        return self.grads is not None

    @property
    def grad(self) -> torch.Tensor:
        """The whole gradient of the step as one float64 vector on the CPU (GradCopiesNotKept without copies)."""
        return torch.cat([g.to("cpu", torch.float64).flatten() for g in _kept(self.grads)])

    @property
    def local_grad(self) -> torch.Tensor:
        """The sum of this process's contributions as one float64 vector on the CPU (GradCopiesNotKept without
        copies)."""
        return torch.cat([g.to("cpu", torch.float64).flatten() for g in _kept(self.local)])


@dataclass(frozen=True)
class StepUpdate:
    """What one real optimizer step did to the weights (harness/instrument/optimizer_steps.py records it)."""

    optimizer: tuple[str, ...]
    """The names of the optimizer's class and of its bases, most derived first (`type(optimizer).__mro__`)."""
    groups: tuple[dict, ...]
    """Each param group's settings at the step: every entry but its parameters (the learning rate as used)."""
    group_of: tuple[int | None, ...]
    """Per parameter: the param group holding it (None: the optimizer holds it in none)."""
    has_grad: tuple[bool, ...]
    """Per parameter: whether its `.grad` was set at the step (an optimizer skips a parameter without one)."""
    counts: tuple[float | None, ...]
    """Per parameter: the optimizer's own step count in its state before the step (None: no state yet)."""
    before: tuple[torch.Tensor, ...]
    """Per parameter: the weights the step started from."""
    after: tuple[torch.Tensor, ...]
    """Per parameter: the weights the step left."""


@dataclass(frozen=True)
class GradTrace:
    """What the recorder saw, frozen: the clock of each backward pass, each step, the unapplied passes."""

    backwards: tuple[int, ...] = ()
    steps: tuple[Step, ...] = ()
    unapplied: tuple[int, ...] = ()
    nonfinite_weights: tuple[int, ...] = ()
    """Per step: parameter tensors holding a NaN or an inf right after it."""
    copies: bool = True
    """Whether the steps kept their `.grad` copies (a trace without them serves only the steps' summaries)."""
    updates: tuple[StepUpdate, ...] = ()
    """Per step, what it did to the weights (kept with the copies only; empty without them)."""
    start: tuple[torch.Tensor, ...] | None = None
    """The weights when the recorder started (kept with the copies only)."""
