"""`python -m harness.bench --live`: what the live check (harness/live/) costs a GRPO run of the medium bench model.

The run (the module an algorithm's `Bench.live_run` names builds it: GRPO's
harness/algorithms/grpo/targets/live/bench.py): the reference GRPO trainer (reference_trainers/grpo.py) on the medium
size's Llama (shapes.py: h=1024, L=4, vocabulary 32000, about 110M parameters, built from its config), completions of
128 tokens after prompts of 16, 2 rows per micro-batch, 3 micro-batches per optimizer step, one log per step. Each run
trains a copy of the same pristine policy from the same seed, so a bare run and a live-checked one sample the same
tokens and do the same work, interval by interval.

Side by side, alternating which goes first: a bare run, and a run under `live_reference(every=1)`, where every interval
is checked (the loss recorder on, the records gathered, the oracle, the comparison, the reports). The extra CPU time of
a checked interval is the median over intervals of (checked - bare) of the same interval; an interval that is not
sampled has nothing of the trainer wrapped (`window_step`'s wrapper only asks whether the interval is sampled). So at
one interval in `every` the overhead is 1 + extra / (every x the bare interval). With `--live-steps N` of at least
`--live-every`, it also trains N steps bare and N steps under `live_reference(every=...)` and prints that ratio end to
end.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .measure import duration, machine_line
from .shapes import MEDIUM_SHAPE
from .sizes import declared

GOAL = 1.01
"""The live check's budget at one interval in 20: at most 1 % of the training time (docs/live.md)."""


@dataclass
class Intervals:
    """Wall and CPU stamps at each log of one run (after every callback of the log, the live check's included)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def stamp(self, metrics, step) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())

    def durations(self, start: tuple[float, float]) -> tuple[list[float], list[float]]:
        walls = [b - a for a, b in zip([start[0], *self.wall], self.wall)]
        cpus = [b - a for a, b in zip([start[1], *self.cpu], self.cpu)]
        return walls, cpus


def timed(run, device: str, steps: int, every: int | None, clock: Callable) -> tuple[list, list, float]:
    """(interval walls, interval CPUs, the live checks' own CPU seconds) of one run; `every=None`: bare."""
    from harness.live import live_reference

    built = declared("live_run").trainer(run, device, steps)
    stamps = Intervals()
    built.callbacks.append(stamps.stamp)
    clock()
    start = (time.perf_counter(), time.process_time())
    if every is None:
        built.train()
        checks = 0.0
    else:
        import logging

        logging.getLogger("harness.live").setLevel(logging.WARNING)  # the bench prints its ratios, not each log's line
        with live_reference(built, every=every, log_expected=True) as live:
            built.train()
        checks = live.summary.cpu_seconds
    clock()
    walls, cpus = stamps.durations(start)
    return walls, cpus, checks


def _median(values) -> float:
    return statistics.median(list(values))


def bench_live(device: str = "cpu", repeat: int = 2, every: int = 20, steps: int | None = None) -> dict:
    """Measure and print the live check's overhead (module docstring); the figures."""
    import torch

    cuda = device.startswith("cuda")

    def clock() -> None:
        if cuda:
            torch.cuda.synchronize()

    builder = declared("live_run")
    run = builder.LiveBenchRun()
    policy, _ = builder.pristine(run, device)
    params = sum(p.numel() for p in policy.parameters())
    print(f"bench live | {device} float32 | {machine_line(device)}")
    print(f"model      {MEDIUM_SHAPE.describe()}, vocab {run.vocab_size}: {params / 1e6:.1f}M parameters; reference "
          f"GRPO trainer, {run.per_device_train_batch_size} rows x {run.gradient_accumulation_steps} micro-batches "
          f"of {run.max_completion_length}-token completions per step, one log per step")  # fmt: skip
    kind = "wall" if cuda else "CPU"
    pick = 0 if cuda else 1
    bare, checked, checks = [], [], []
    started = time.perf_counter()
    timed(run, device, 1, None, clock)  # untimed: lazy imports, first generation
    for i in range(repeat):
        order = (None, 1) if i % 2 == 0 else (1, None)
        for mode in order:
            walls, cpus, spent = timed(run, device, run.steps, mode, clock)
            values = (walls, cpus)[pick][1:]  # the first interval holds the run's own start-up
            (bare if mode is None else checked).append(values)
            if mode is not None:
                checks.append(spent / run.steps)
    pairs = [c - b for bs, cs in zip(bare, checked) for b, c in zip(bs, cs)]
    bare_interval = _median(v for values in bare for v in values)
    extra = _median(pairs)
    ratio = 1 + max(extra, 0.0) / (every * bare_interval)
    # a negative median pair is noise: the ratio counts it as no cost, and the line says so
    signed = f"+{duration(extra)}" if extra >= 0 else f"-{duration(-extra)}, below the noise: counted as 0"
    print(f"interval   bare {duration(bare_interval)} {kind} | checked {duration(bare_interval + extra)} "
          f"({signed}; of which the check itself {duration(_median(checks))} CPU: merge, oracle, "
          f"compare, reports; the rest is recording) | median of {len(pairs)} same-interval pairs")  # fmt: skip
    print(
        f"live       one interval in {every}: ratio {ratio:.4f}x {kind} = 1 + extra / ({every} x bare interval) "
        f"(goal <= {GOAL}x)"
    )
    figures = {"live_ratio": ratio, "bare_interval": bare_interval, "checked_extra": extra}
    if steps is not None and steps >= every:
        walls_b, cpus_b, _ = timed(run, device, steps, None, clock)
        walls_l, cpus_l, spent = timed(run, device, steps, every, clock)
        b, lv = sum((walls_b, cpus_b)[pick]), sum((walls_l, cpus_l)[pick])
        figures["live_ratio_end_to_end"] = lv / b
        print(f"end to end {steps} steps: bare {duration(b)} | live every={every} {duration(lv)} | ratio "
              f"{lv / b:.4f}x {kind} (checks {duration(spent)} CPU)")  # fmt: skip
    print(f"wall       {time.perf_counter() - started:.0f} s")
    return figures
