"""Where the gate's own time goes: its pieces timed inside one spied run, by timing wrappers.

While `clocked()` is active, the spy's recorder (and within it the per-token entropy over the
vocabulary, the float64 copies, the call-site naming, the argument binding), the value head's
forward hook and the gradient recorder's hooks (backward counter, per-parameter contribution and
accumulation, the step's check before it and the weights' after it) are wrapped in timers. The
wrappers cost about a microsecond a call, which is nothing next to what they time. On the CPU they
read the process's CPU time (steadier than wall time on a shared machine); on CUDA wall time, and
each one synchronises the device, so that the time is the piece's own.
The oracle's pieces (view, expectations, compare) are timed by `measure.gate_run` itself.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import Iterator

import torch

PIECES = {
    "entropy": "per-token entropy and log-prob gap over the vocabulary, one float64 pass",
    "copies": "float64 / bool / int64 CPU copies of values, masks, ids, results",
    "site": "call-site naming (ast, cached per code position)",
    "bind": "binding the call's arguments to the signature",
    "record": "the spy's whole record step (the four above and the record itself)",
    "value_head": "the value head's forward hook (its output copied to float64)",
    "grad_contribution": "per-parameter gradient hook (clone / add the contribution; a check when tracked)",
    "grad_accumulated": "per-parameter hook after accumulation (tracked: the .grad, its version, 256 values)",
    "grad_step": "optimizer step pre-hook (the unexplained-gradient check; the .grad copy when kept)",
    "grad_after_step": "optimizer step post-hook (weights holding a NaN or an inf)",
    "grad_backward": "multi-grad hook counting backward passes",
}


class Totals:
    """Seconds (wall, or process CPU time on the CPU, where other processes share the cores) and calls per piece."""

    def __init__(self, cpu_time: bool) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.now = time.process_time if cpu_time else time.perf_counter

    def spy_other(self) -> float:
        """Record-step time not in the four named pieces (dataclass building, seq numbering)."""
        named = sum(self.seconds[p] for p in ("entropy", "copies", "site", "bind"))
        return max(0.0, self.seconds["record"] - named)

    def gate_train_s(self) -> float:
        """All the gate's time inside train(): the spy's record step, the value head's hook and the gradient hooks."""
        return sum(self.seconds[p] for p in PIECES if p in ("record", "value_head") or p.startswith("grad_"))


def _timed(fn, piece: str, totals: Totals, sync: bool):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if sync:
            torch.cuda.synchronize()
        start = totals.now()
        try:
            return fn(*args, **kwargs)
        finally:
            if sync:
                torch.cuda.synchronize()
            totals.seconds[piece] += totals.now() - start
            totals.calls[piece] += 1

    return wrapper


@contextlib.contextmanager
def clocked(device: str = "cpu") -> Iterator[Totals]:
    """Time the gate's pieces in every Spy, ValueRecorder and GradRecorder made inside the block."""
    from harness.instrument import spy as spy_module
    from harness.instrument.grad import GradRecorder
    from harness.instrument.values import ValueRecorder

    sync = device.startswith("cuda")
    totals = Totals(cpu_time=not sync)
    patches = [
        (spy_module, "reduce_logits", "entropy"),
        (spy_module, "_copy", "copies"),
        (spy_module, "call_site", "site"),
        (spy_module, "_bind", "bind"),
        (spy_module.Spy, "_record", "record"),
        (ValueRecorder, "_hook", "value_head"),
        (GradRecorder, "_on_backward", "grad_backward"),
        (GradRecorder, "_on_step", "grad_step"),
        (GradRecorder, "_after_step", "grad_after_step"),
    ]
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    makers = {"_contribution": "grad_contribution", "_accumulated": "grad_accumulated"}  # each makes a hook
    made = {name: GradRecorder.__dict__[name] for name in makers}

    def timed_maker(name: str):
        def maker(self, i):
            return _timed(made[name](self, i), makers[name], totals, sync)

        return maker

    try:
        for owner, name, piece in patches:
            setattr(owner, name, _timed(owner.__dict__[name], piece, totals, sync))
        for name in makers:
            setattr(GradRecorder, name, timed_maker(name))
        yield totals
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
        for name, original in made.items():
            setattr(GradRecorder, name, original)
