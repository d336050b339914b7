"""Gradient recorder: which backward passes reach which optimizer step.

Hooks (no change to the trainer): a multi-grad hook counts backward passes, a
tensor hook per parameter sums each backward's gradient contribution, an
optimizer step pre-hook compares `.grad` at every real step with the
contributions since the previous step, and a step post-hook counts the weights
that hold a NaN or an inf after it (`_nonfinite`: one sum per tensor, no
temporary of its size).

Every step keeps its summaries (which backward passes it applied, the
unexplained part of `.grad`, the norms, the clipping coefficient, the non-finite
tensors). It keeps a copy of `.grad` itself, and of the contributions' sums, only
when the recorder is made with `copies=True` (with the weights before and after each step, and the optimizer's
settings: optimizer_steps.py): a model-sized tensor per step,
which only the checks that compare gradients themselves read (`Step.grad`,
`Step.local_grad`, in grad_trace.py, the frozen `GradTrace` this recorder's `trace()`
returns); without the copies those raise `GradCopiesNotKept`, and each step
sums its contributions into the storage of the step before (a fresh model-sized tensor
per step costs mostly page faults: large blocks are mapped and unmapped each time).

With `track=True` (only without the copies) the recorder does not sum the contributions of
a step's backward passes where it can prove that `.grad` is that sum: a parameter whose
`.grad` is None at the step's first contribution gets it from autograd alone, and after
each accumulation the recorder notes the `.grad` tensor, its version counter (every
in-place write through it counts) and 256 of its elements at fixed positions. If, at the
next contribution or at the step, `.grad` is the same tensor with the same version and the
same 256 values, nothing but autograd wrote it, and it is the contributions' own sum bit for
bit: the step's summaries are those of a summing recorder, at no model-sized cost per
backward. Anything else (a `.grad` set to None or replaced between backward passes, an
in-place write such as clipping's, a write through `.data` that the version counter misses
but the sampled values show) loses the sum: the trace then raises `GradTrackingLost`, and
`observe` makes the run again with a summing recorder. A `.grad` that is not None at a
step's first contribution (a zero_grad that zeroes in place, or none) is summed as before.
Only parameters of at least TRACK_MIN elements are tracked: below that, the two hooks' fixed
cost is more than the sum's (on the toy models every gate trains, tracking all of them took a
run from 69 to 79 ms against 64 ms bare).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .grad_trace import GradTrace, Step
from .optimizer_steps import WeightSteps


class GradTrackingLost(RuntimeError):
    """A tracking recorder saw `.grad` written by something other than autograd: the steps' sums are not known,
    and the run must be made again with a summing recorder (`observe` does; never a pass)."""


SAMPLED = 256
"""Elements of each parameter's `.grad` a tracking recorder reads after each accumulation (fixed positions)."""
TRACK_MIN = 1 << 18
"""Elements a parameter needs for a tracking recorder to track it rather than sum it (262144: 1 MiB of float32; summing
a tensor that size costs about what tracking's two hooks and sampled reads cost)."""
TRACKED, SUMMED = "tracked", "summed"
"""How a parameter's contributions to the current step are known: autograd's `.grad` itself, or summed here."""


def _max_abs(tensors: list[torch.Tensor]) -> float:
    """max |x| over every element of `tensors` (0.0 for none), read back once per device."""
    peaks: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        if t.numel():
            low, high = torch.aminmax(t.detach())
            peaks.setdefault(t.device, []).append(torch.maximum(-low, high).double())
    return max((torch.stack(group).max().item() for group in peaks.values()), default=0.0)


def _nonfinite(tensors) -> int:
    """How many of `tensors` hold a NaN or an inf.

    One sum per tensor, with no temporary of its size: a NaN or an inf makes the sum non-finite (NaN + x and
    inf - inf are NaN, inf + finite is inf), so a finite sum clears the tensor; `torch.isfinite` runs only where
    the sum is not finite, which finite values make by overflowing. `isfinite(x).all()` on every tensor took
    a 188M-parameter run's two optimizer steps about 1.5 s of 15.5 s of CPU time (docs/bench.md)."""
    count = 0
    for t in tensors:
        t = t.detach()
        if t.numel() and not math.isfinite(float(t.sum())) and not bool(torch.isfinite(t).all()):
            count += 1
    return count


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Element for element equal, a NaN equal to a NaN in its place (to torch.equal a NaN equals nothing, which
    made a tracked .grad holding a NaN look written by something other than autograd)."""
    return torch.equal(a, b) or (a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all()))


def _same_storage_kind(spare: torch.Tensor, g: torch.Tensor) -> bool:
    """Whether `g` can be copied into `spare` in place of a clone: the same dense layout, dtype, device and shape."""
    kind = (spare.dtype, spare.device, spare.shape, spare.stride())
    return spare.layout == g.layout == torch.strided and kind == (g.dtype, g.device, g.shape, g.stride())


@dataclass
class GradRecorder:
    """Records backward passes and optimizer steps of a run; use as a context manager.

    `copies`: keep each step's `.grad` copy and its contributions' sums (see the module's docstring).
    `track`: prove `.grad` is the contributions' sum instead of summing them, where it is (the module's
    docstring); ignored with `copies`.
    """

    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    clock: Callable[[], int] = lambda: 0
    copies: bool = True
    track: bool = False
    track_min: int | None = None
    """Elements a parameter needs to be tracked (None: TRACK_MIN)."""
    backwards: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    nonfinite_weights: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.params = [p for p in self.params if p.requires_grad]
        if not self.params:
            raise ValueError("GradRecorder: the target exposes no trainable parameters")
        self._pending = [None] * len(self.params)
        self._pending_ids: list[int] = []
        self._handles: list = []
        # storage for the pending sums, reused from step to step when the steps keep no copies: a fresh
        # model-sized tensor each step is mostly page faults (large blocks are mapped and unmapped each time)
        self._spare: list[torch.Tensor | None] = [None] * len(self.params)
        self.track = self.track and not self.copies
        smallest = TRACK_MIN if self.track_min is None else self.track_min
        self._trackable = [self.track and p.numel() >= smallest for p in self.params]
        self._mode: list[str | None] = [None] * len(self.params)
        self._after: list[tuple | None] = [None] * len(self.params)  # (the .grad, its version, its sampled values)
        self._positions: list[torch.Tensor | None] = [None] * len(self.params)
        self.lost = ""
        """Why the tracked sums were lost ("" while they are not)."""
        self._weights: WeightSteps | None = None

    def __enter__(self) -> GradRecorder:
        if self.copies:
            self._weights = WeightSteps(self.params, self.optimizer)
        self._handles.append(torch.autograd.graph.register_multi_grad_hook(self.params, self._on_backward, mode="any"))
        for i, p in enumerate(self.params):
            self._handles.append(p.register_hook(self._contribution(i)))
            if self._trackable[i]:
                self._handles.append(p.register_post_accumulate_grad_hook(self._accumulated(i)))
        self._handles.append(self.optimizer.register_step_pre_hook(self._on_step))
        self._handles.append(self.optimizer.register_step_post_hook(self._after_step))
        return self

    def __exit__(self, *exc) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._spare = [None] * len(self.params)
        self._after = [None] * len(self.params)
        return False

    def _on_backward(self, grad) -> None:
        self.backwards.append(self.clock())
        self._pending_ids.append(len(self.backwards) - 1)

    def _sampled(self, i: int, g: torch.Tensor) -> torch.Tensor:
        """SAMPLED elements of `g` (parameter i's .grad) at positions fixed for the run (all of a small one)."""
        flat = g.detach().reshape(-1)
        if self._positions[i] is None or self._positions[i].device != flat.device:
            count = flat.numel()
            if count <= SAMPLED:
                self._positions[i] = torch.arange(count, device=flat.device)
            else:
                # drawn, not a permutation's head: a randperm of a 10^7-element tensor costs a second and its memory
                chosen = torch.randint(count, (SAMPLED,), generator=torch.Generator().manual_seed(i))
                self._positions[i] = chosen.to(flat.device)
        return flat[self._positions[i]]

    def _accumulated(self, i: int):
        def hook(p: torch.Tensor) -> None:
            if self._mode[i] == TRACKED and p.grad is not None:
                self._after[i] = (weakref.ref(p.grad), p.grad._version, self._sampled(i, p.grad))

        return hook

    def _untouched(self, i: int, where: str) -> bool:
        """Whether parameter i's .grad is as autograd left it after its last accumulation (else the sum is lost)."""
        after, g = self._after[i], self.params[i].grad
        same = (
            after is not None
            and g is not None
            and after[0]() is g
            and g._version == after[1]
            and _same_values(self._sampled(i, g), after[2])
        )
        if not same and not self.lost:
            self.lost = f"parameter {i}'s .grad was written {where} by something other than autograd's accumulation"
        return same

    def _contribution(self, i: int):
        def hook(grad: torch.Tensor) -> None:
            # kept in the gradient's own dtype and device: summed in the order autograd sums `.grad`
            g = grad.detach()
            if self._mode[i] is None:  # the step's first contribution: autograd's .grad is the sum where it was None
                self._mode[i] = TRACKED if self._trackable[i] and self.params[i].grad is None else SUMMED
            if self._mode[i] == TRACKED:
                if self._after[i] is not None:
                    self._untouched(i, "between two backward passes")
                return
            if self._pending[i] is not None:
                self._pending[i].add_(g)
                return
            spare = self._spare[i]
            if spare is not None and _same_storage_kind(spare, g):
                self._pending[i] = spare.copy_(g)
            else:
                self._pending[i] = g.clone()

        return hook

    def _on_step(self, optimizer, args, kwargs) -> None:
        # unexplained = max |.grad - contributions| / max(|.grad|, |contributions|), computed without a
        # temporary the size of the model: at 10^8 parameters a fresh allocation's page faults cost more than
        # the arithmetic. Where the contributions' sum equals .grad bit for bit (the usual case: it is summed
        # as autograd sums .grad) that sum is the copy to keep and its gap is 0; elsewhere .grad is cloned
        # (only when the step keeps it: the trainer's .grad is only read here) and the difference is taken, in
        # float32 as always, in the pending sum itself, which this step drops. max |x| is max(-min x, max x).
        if self._weights is not None:
            self._weights.before()
        grads, expected, differing, local = [], [], [], []
        for i, (p, e) in enumerate(zip(self.params, self._pending)):
            if self._mode[i] == TRACKED and self._untouched(i, "after the step's last backward pass"):
                g = p.grad.detach()  # the contributions' own sum: nothing but autograd wrote it
                grads.append(g)
                expected.append(g)
                continue
            g = torch.zeros_like(p) if p.grad is None else p.grad.detach()
            same_kind = e is not None and (e.dtype, e.device, e.shape) == (g.dtype, g.device, g.shape)
            if same_kind and torch.equal(e, g):
                grads.append(e)
                expected.append(e)
                local.append(e)
            else:
                copy = g.clone() if self.copies and p.grad is not None else g
                grads.append(copy)
                expected.append(torch.zeros_like(copy) if e is None else e)
                differing.append((copy, e))
                if self.copies:
                    local.append(torch.zeros_like(copy) if e is None else e.clone())  # the gap below overwrites e
        *fit, nonfinite, nan = _rescaling(grads, expected)  # before the difference below overwrites the pending sums
        if differing:
            scale = max(_max_abs(grads), _max_abs([e for _, e in differing if e is not None]), 1e-30)
            gap = _max_abs([g if e is None else e.float().sub_(g.float()) for g, e in differing])
            unexplained = gap / scale
        else:  # every .grad is its contributions' own sum: a gap of 0 over any scale, NaN where a .grad holds one
            unexplained = math.nan if nan else 0.0  # (as max |.grad| would make the scale); no pass over the grads
        kept, sums = (grads, tuple(local)) if self.copies else (None, None)
        step = Step(self.clock(), list(self._pending_ids), kept, unexplained, *fit, nonfinite, sums)
        self.steps.append(step)
        if not self.copies:  # nothing of this step keeps its sums: their storage serves the next step
            self._spare = [s if e is None else e for s, e in zip(self._spare, self._pending)]
        self._pending = [None] * len(self.params)
        self._pending_ids = []
        self._mode = [None] * len(self.params)
        self._after = [None] * len(self.params)

    def _after_step(self, optimizer, args, kwargs) -> None:
        self.nonfinite_weights.append(_nonfinite(self.params))
        if self._weights is not None:
            self._weights.after()

    def trace(self) -> GradTrace:
        """The frozen record of the run so far (GradTrackingLost where a tracking recorder lost the sums)."""
        if self.lost:
            raise GradTrackingLost(f"{self.lost}: the run must be recorded again with a summing recorder")
        weights = self._weights
        return GradTrace(
            tuple(self.backwards), tuple(self.steps), tuple(self.unapplied), tuple(self.nonfinite_weights), self.copies,
            tuple(weights.updates) if weights else (), weights.start if weights else None,
        )  # fmt: skip

    @property
    def unapplied(self) -> list[int]:
        """Backward passes whose gradient no step has applied (yet)."""
        return list(self._pending_ids)


def _rescaling(grads: list[torch.Tensor], sums: list[torch.Tensor]) -> tuple[float, float, float, float, int, bool]:
    """(|sum|, |grad|, c, residual, non-finite .grad tensors, whether a .grad holds a NaN), c the least-squares
    scalar of grad on sum.

    Clipping by global norm multiplies the whole sum by one coefficient; anything else leaves a residual.
    Norms and dot products are reduced in each tensor's own dtype (pairwise sums; no copy of a tensor) and
    accumulated in float64; a tensor whose .grad is its sum (the step keeps the same object) adds its own
    norm to every total without a second pass. A tensor holds a NaN or an inf exactly when its norm does (a NaN
    exactly when its norm is NaN).
    """

    def squared_norm(x: torch.Tensor) -> float:
        return float(torch.linalg.vector_norm(x)) ** 2

    ge = ee = gg = same = 0.0
    nonfinite = 0
    nan = False
    differing = []
    for g, e in zip(grads, sums):
        norm = squared_norm(e)
        ee += norm
        if g is e:
            g_norm = norm
            ge, gg, same = ge + norm, gg + norm, same + norm
        else:
            g_norm = squared_norm(g)
            ge += float((g * e).sum())
            gg += g_norm
            differing.append((g, e))
        nonfinite += not math.isfinite(g_norm)
        nan = nan or math.isnan(g_norm)
    raw, applied = ee**0.5, gg**0.5
    if ee == 0.0 or not (math.isfinite(ee) and math.isfinite(gg)):
        return raw, applied, 1.0, 0.0 if gg == ee == 0.0 else 1.0, nonfinite, nan
    c = ge / ee
    left = (1 - c) ** 2 * same + sum(squared_norm(g - c * e) for g, e in differing)
    return raw, applied, c, left**0.5 / max(applied, 1e-30), nonfinite, nan
