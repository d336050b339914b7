"""An optimizer step recomputed in float64 from what the gradient recorder kept: AdamW, Adam and SGD.

Each step's new weights follow from the weights it started from, the gradient it applied (`.grad` at the
step, after any clipping: what the optimizer saw), the settings of the param group holding each weight (the
learning rate as the step used it) and the optimizer's running state, which the oracle keeps itself: its own
moments and step count per parameter, zero before the first step it saw, advanced only at the steps where the
parameter had a gradient (as torch's optimizers skip a parameter whose `.grad` is None). The formulas are the
algorithm boxes of PyTorch's documentation (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD), `maximize`,
`amsgrad`, `nesterov` and Adam's `decoupled_weight_decay` included; `foreach`, `fused`, `capturable` and
`differentiable` choose kernels, not arithmetic.

`tolerance`: how far a correct optimizer computing in the weights' dtype (u its unit roundoff) can land from the
float64 value, per element, derived as precision.py's bounds are (Higham, 2nd ed., 2.2): the decoupled decay
p(1 - lr wd) and the final subtraction round at most 3 times at the size of the weights (2|p| + |p'|); the
moments are running sums the optimizer keeps in the weights' dtype, so at its t-th step for a parameter each
carries at most about 3t roundings at the size of its terms, which the oracle bounds by its own running sum of
|g| (M, in place of |m|); sqrt, the bias corrections, eps and the division add a few more. The update's error is
then at most (5t + 8) u lr M^ / (sqrt(v^) + eps) for Adam, (3t + 4) u lr B for SGD (B: the running sum of
|g| + wd |p| the momentum buffer is made of); the whole is doubled (precision.SAFETY). Nothing here imports a
trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.errors import NotRecomputable

from .precision import SAFETY

KINDS = ("adamw", "adam", "sgd")
"""The optimizers recomputed, by the lower-cased name of torch's class (a subclass is read by its first known base)."""
SETTINGS = {
    "adamw": ("lr", "betas", "eps", "weight_decay"),
    "adam": ("lr", "betas", "eps", "weight_decay"),
    "sgd": ("lr", "momentum", "dampening", "weight_decay"),
}
"""The param group entries each kind needs (its other entries default as torch's do)."""


def kind_of(classes: tuple[str, ...], declared: str | None = None) -> str | None:
    """The kind of an optimizer whose class and bases are named `classes` (most derived first), or `declared`
    (a target's declaration, for an optimizer that is no subclass of torch's); None when neither is known."""
    if declared is not None:
        return declared.lower() if declared.lower() in KINDS else None
    return next((name.lower() for name in classes if name.lower() in KINDS), None)


def _number(group: dict, key: str, default=None) -> float:
    value = group.get(key, default)
    if value is None:
        raise NotRecomputable(f"the param group has no {key!r}")
    return value


@dataclass
class _State:
    """The oracle's own state for one parameter: its step count and running tensors (float64)."""

    t: int = 0
    tensors: dict = field(default_factory=dict)

    def zeros(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return self.tensors.get(name, torch.zeros_like(like))


class Optimizer:
    """The float64 twin of one optimizer of kind `kind`, stepped parameter by parameter."""

    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise NotRecomputable(f"no recomputation of a {kind!r} optimizer (known: {', '.join(KINDS)})")
        self.kind = kind
        self.state: dict[int, _State] = {}

    def steps_taken(self, index: int) -> int:
        """How many steps the oracle has applied to parameter `index`."""
        return self.state[index].t if index in self.state else 0

    def step(self, index: int, weights: torch.Tensor, grad: torch.Tensor, group: dict, u: float
             ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """(the new weights, their tolerance per element), float64, for parameter `index` at one step; `weights`
        and `grad` as recorded (any dtype), `group` the settings of its param group, `u` the unit roundoff of the
        dtype the optimizer computes in."""
        p, g = weights.detach().to("cpu", torch.float64), grad.detach().to("cpu", torch.float64)
        state = self.state.setdefault(index, _State())
        state.t += 1
        if self.kind == "sgd":
            return self._sgd(state, p, g, group, u)
        return self._adam(state, p, g, group, u)

    def _adam(self, s: _State, p, g, group: dict, u: float):
        lr, eps, wd = (float(_number(group, k)) for k in ("lr", "eps", "weight_decay"))
        beta1, beta2 = _number(group, "betas")
        if group.get("maximize", False):
            g = -g
        decayed = p
        if wd != 0:
            if self.kind == "adamw" or group.get("decoupled_weight_decay", False):
                decayed = p * (1 - lr * wd)
            else:
                g = g + wd * p
        m = beta1 * s.zeros("m", p) + (1 - beta1) * g
        v = beta2 * s.zeros("v", p) + (1 - beta2) * g * g
        size = beta1 * s.zeros("size", p) + (1 - beta1) * g.abs()
        s.tensors.update(m=m, v=v, size=size)
        if group.get("amsgrad", False):
            v = torch.maximum(s.zeros("v_max", p), v)
            s.tensors["v_max"] = v
        first, second = 1 - beta1**s.t, 1 - beta2**s.t
        denominator = (v / second).sqrt() + eps
        new = decayed - lr * (m / first) / denominator
        update_error = (5 * s.t + 8) * lr * (size / first) / denominator
        return new, SAFETY * u * (2 * p.abs() + new.abs() + update_error)

    def _sgd(self, s: _State, p, g, group: dict, u: float):
        lr, momentum, dampening, wd = (float(_number(group, k, 0.0)) for k in SETTINGS["sgd"])
        if group.get("maximize", False):
            g = -g
        if wd != 0:
            g = g + wd * p
        size = g.abs()
        if momentum != 0:
            if "buffer" in s.tensors:
                buffer = momentum * s.tensors["buffer"] + (1 - dampening) * g
                buffer_size = momentum * s.tensors["buffer_size"] + (1 - dampening) * size
            else:  # torch's first step takes the gradient itself as the buffer
                buffer, buffer_size = g, size
            s.tensors.update(buffer=buffer, buffer_size=buffer_size)
            if group.get("nesterov", False):
                g, size = g + momentum * buffer, size + momentum * buffer_size
            else:
                g, size = buffer, buffer_size
        new = p - lr * g
        return new, SAFETY * u * (2 * p.abs() + new.abs() + (3 * s.t + 4) * lr * size)
