"""One bare run and one spied-and-checked run of a target, timed and weighed.

"Spied and checked" is what the gate does with a run: train under the instruments `observe`
installs (`harness.instrument.observe.instrumented`: the Spy, the value head's recorder, the
GradRecorder), then the oracle on the records: the view, the mask check, the expectations and
the comparison of every metric it recomputes. The gate's ordinary run keeps no `.grad` copies;
`copies=True` measures a run of the checks that read them (gradient_partition,
gradient_decomposition, verify-dist), whose recorder keeps one per optimizer step. Peak memory is the
process's RSS high-water during `train()` on the CPU (reset through /proc/self/clear_refs),
`torch.cuda.max_memory_allocated` on CUDA. `machine_line` and `duration` say, in every bench's output (the gate's
and the live check's), on what it measured and how long something took.
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch


class PeakMemory:
    """Peak memory of a stretch of the run: reset, run, read."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self.resettable = self.cuda or self._clear_refs()
        if self.cuda:
            self.what = "torch.cuda.max_memory_allocated"
        elif self.resettable:
            self.what = "RSS high-water"
        else:
            self.what = "process RSS high-water since start (/proc/self/clear_refs not writable)"

    @staticmethod
    def _clear_refs() -> bool:
        """Reset the kernel's RSS high-water mark (VmHWM); False where that is not possible."""
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        elif self.resettable:
            self._clear_refs()

    def peak(self) -> int:
        """Bytes: the high-water mark since the last reset."""
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated()
        if self.resettable:
            return _proc_status_kib("VmHWM") * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def current(self) -> int:
        """Bytes in use now."""
        if self.cuda:
            return torch.cuda.memory_allocated()
        return _proc_status_kib("VmRSS") * 1024 if self.resettable else 0


def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+)", f.read(), re.M).group(1))


def tensor_bytes(value) -> int:
    """Bytes of tensor data in a record, a mapping of tensors or a tensor."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, Mapping):
        return sum(tensor_bytes(v) for v in value.values())
    if dataclasses.is_dataclass(value):
        return sum(tensor_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


def duration(s: float) -> str:
    """`2.35 s`, or `12.3 ms` below a second."""
    return f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.1f} ms"


def machine_line(device: str) -> str:
    """The GPU and CUDA release on CUDA; on the CPU its cores, OMP_NUM_THREADS and torch's threads."""
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name()
        return f"{name}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    torch_threads = torch.get_num_threads()
    return f"{os.cpu_count()} cores, OMP_NUM_THREADS={threads}, torch {torch.__version__} ({torch_threads} threads)"


HEAP_SETTINGS = {"M_MMAP_MAX": (-4, 0), "M_TRIM_THRESHOLD": (-1, -1), "M_TOP_PAD": (-2, 256 << 20)}
"""glibc's mallopt parameters (number, value) that `steady_heap` sets: no block is mapped on its own (every one comes
from the heap), the heap's top is never given back (-1: mallopt(3)'s "disables trimming completely"), and the heap
grows 256 MiB beyond each request."""


def steady_heap() -> str:
    """From now on keep every byte the process frees for its next allocations (glibc's malloc); a line saying what
    was set, or why nothing was.

    By default glibc maps each block over its mmap threshold (at most 32 MiB; a medium run's logits and embedding
    gradients are 37-131 MB) on its own and unmaps it when freed, moves that threshold with each free and trims
    the heap's top, so each run faults in part of its memory afresh: 0 to 1.7 million minor page faults a medium
    run, some seconds of its CPU time, whatever the arm (docs/bench.md, "The step's hooks and a steady heap").
    With nothing mapped on its own and nothing given back, the heap grows over the first runs to hold what the
    largest needs, and later runs fault nothing. It also holds the process's RSS high-water mark up, which is why
    the bench weighs each arm's memory in runs before this. Set before the timed rounds, for every arm alike."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return f"heap       left as it is: no glibc mallopt here ({name or 'no C library found'})"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    refused = [key for key, (number, value) in HEAP_SETTINGS.items() if mallopt(number, value) != 1]
    if refused:
        return f"heap       glibc refused mallopt {', '.join(refused)}: runs may fault unequally"
    return (
        "heap       steady for the timed rounds (glibc mallopt: no block mapped on its own, nothing trimmed, top pad "
        "256 MiB): what a run frees serves the next, so that no arm's runs fault more than another's"
    )


@dataclass(frozen=True)
class Stamp:
    """Wall-clock and process CPU seconds, and the process's minor page faults; a difference of two stamps is a
    duration of all three."""

    wall: float
    cpu: float
    faults: int = 0
    """Minor page faults (getrusage's ru_minflt): on the CPU a large run's time follows them, about 10 us each
    (docs/bench.md, "Tracking instead of summing"), whatever the arm."""

    def __sub__(self, other: Stamp) -> Stamp:
        return Stamp(self.wall - other.wall, self.cpu - other.cpu, self.faults - other.faults)

    def __add__(self, other: Stamp) -> Stamp:
        return Stamp(self.wall + other.wall, self.cpu + other.cpu, self.faults + other.faults)


class Clock:
    """Wall time (synchronised with the device, so that queued CUDA work is counted) and process CPU time.

    On a shared CPU machine the process's CPU time is the steadier of the two: it does not count
    the time other processes hold the cores (with OMP_NUM_THREADS=1 the run uses one core).
    """

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def now(self) -> Stamp:
        if self.cuda:
            torch.cuda.synchronize()
        return Stamp(time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


@dataclass(frozen=True)
class BareRun:
    train: Stamp
    peak: int
    before: int
    """Memory in use when train() began (the models, the optimizer's parameters)."""


@dataclass(frozen=True)
class GateRun:
    train: Stamp
    view: Stamp
    expect: Stamp
    compare: Stamp
    peak: int
    before: int
    record_bytes: int
    records: int
    grad_trace_bytes: int
    steps: int
    copies: bool
    """Whether the gradient recorder kept each step's .grad copy."""
    statuses: dict[str, int]
    problems: tuple[str, ...]
    params: int

    @property
    def oracle(self) -> Stamp:
        return self.view + self.expect + self.compare

    @property
    def total(self) -> Stamp:
        return self.train + self.oracle


def bare_run(factory: Callable, spec, memory: PeakMemory, clock: Clock) -> BareRun:
    """Train once, with nothing watching."""
    run = factory(spec)
    before = memory.current()
    memory.reset()
    start = clock.now()
    run.train()
    return BareRun(clock.now() - start, memory.peak(), before)


def gate_run(factory: Callable, spec, memory: PeakMemory, clock: Clock, oracle, copies: bool = False) -> GateRun:
    """Train once under the gate's instruments (keeping each step's .grad copy when `copies`), then check the
    run as the gate does, with the algorithm's `oracle` (`Bench.oracle`: its view, expectations and comparison,
    each timed)."""
    from harness.instrument.observe import instrumented, tracks

    run = factory(spec)
    before = memory.current()
    memory.reset()
    start = clock.now()
    with instrumented(run, spec.instruments, copies=copies, track=tracks(spec, copies)) as (recording, grads):
        logs = run.train()
    trained = clock.now()
    trace = grads.trace()  # a bench target that lost the tracked sums raises here (observe would train it again)
    records = recording.payload(run).records  # as observe keeps them: with the gradients their backward passes brought
    view, problems = oracle.view(run, records)
    viewed = clock.now()
    expected = oracle.expect(view, run, spec)
    expected_at = clock.now()
    verdicts = oracle.compare(logs, expected, spec)
    compared = clock.now()
    peak = memory.peak()
    statuses: dict[str, int] = {}
    for verdict in verdicts:
        statuses[verdict.status.value] = statuses.get(verdict.status.value, 0) + 1
    return GateRun(
        train=trained - start,
        view=viewed - trained,
        expect=expected_at - viewed,
        compare=compared - expected_at,
        peak=peak,
        before=before,
        record_bytes=sum(tensor_bytes(r) for r in records),
        records=len(records),
        grad_trace_bytes=sum(tensor_bytes(g) for step in trace.steps for g in step.grads or ()),
        steps=len(trace.steps),
        copies=trace.copies,
        statuses=statuses,
        problems=problems,
        params=sum(p.numel() for p in run.params),
    )


def recording_bytes(factory: Callable, spec) -> int:
    """Bytes of tensor data the spy keeps for one run of `spec`."""
    from harness.instrument.spy import Spy

    run = factory(spec)
    with Spy(run.module) as spy:
        run.train()
    return sum(tensor_bytes(r) for r in spy.records)
