"""What each optimizer step did to the weights, for the step's recomputation (harness/oracle/optimizer.py).

The gradient recorder (grad.py) owns one of these when it keeps the steps' `.grad` copies: at each real step's
pre-hook it copies the weights the optimizer starts from and reads the optimizer's settings (every entry of each
param group but its parameters, the learning rate as the step will use it) and its own step count per parameter;
at the step's post-hook it copies the weights the step left. The weights at the recorder's start are kept too,
so that a write to the weights outside the optimizer shows as weights that moved between two steps. Weights
that did not move between one step's end and the next step's start are kept once (the same tensor).
"""

from __future__ import annotations

import numbers

import torch

from .grad_trace import StepUpdate


def _setting(value):
    """A param group's entry as plain data (a one-element tensor as a float), or None for what is no setting."""
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 else None
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (tuple, list)):
        items = [_setting(v) for v in value]
        return tuple(items) if all(isinstance(i, float) for i in items) else None
    return None


def settings(group: dict) -> dict:
    """Every entry of a param group but its parameters, as plain data (entries that are no number, flag, name or
    tuple of numbers are left out: a closure, a device)."""
    plain = {key: _setting(value) for key, value in group.items() if key != "params"}
    return {key: value for key, value in plain.items() if value is not None or group[key] is None}


def _count(state: dict) -> float | None:
    """The optimizer's own step count in one parameter's state (None before its first step or without one)."""
    step = state.get("step") if isinstance(state, dict) else None
    return None if step is None else float(step)


def _copy(p: torch.Tensor) -> torch.Tensor:
    return p.detach().clone()


class WeightSteps:
    """The weights before and after each optimizer step of a run, and the optimizer's settings at each."""

    def __init__(self, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
        self.params, self.optimizer = params, optimizer
        self.start = tuple(_copy(p) for p in params)
        self.updates: list[StepUpdate] = []
        self._last = self.start
        self._pending: dict | None = None

    def before(self) -> None:
        """At a step's pre-hook: the weights it starts from, its settings, its step counts, which params have a
        gradient."""
        owner = {id(p): i for i, group in enumerate(self.optimizer.param_groups) for p in group["params"]}
        state = self.optimizer.state
        before = tuple(last if torch.equal(last, p.detach()) else _copy(p) for last, p in zip(self._last, self.params))
        self._pending = {
            "optimizer": tuple(k.__name__ for k in type(self.optimizer).__mro__),
            "groups": tuple(settings(group) for group in self.optimizer.param_groups),
            "group_of": tuple(owner.get(id(p)) for p in self.params),
            "has_grad": tuple(p.grad is not None for p in self.params),
            "counts": tuple(_count(state.get(p, {})) for p in self.params),
            "before": before,
        }

    def after(self) -> None:
        """At the step's post-hook: the weights it left."""
        if self._pending is None:  # a post-hook without its pre-hook: nothing to pair it with
            return
        after = tuple(_copy(p) for p in self.params)
        self.updates.append(StepUpdate(**self._pending, after=after))
        self._last, self._pending = after, None
