"""`python -m harness.bench [--size small|medium|large] [--device cpu|cuda]`: the gate's cost, from one run.

For the size's run (sizes.py), side by side in one process:

1. overhead: the run trained bare vs trained under the gate's instruments (as `observe` runs a
   target: the spy, the value head's recorder, the gradient recorder without the steps' .grad
   copies) and then checked by the oracle (view, masks, expectations, comparison of every
   recomputed metric); beside it (unless --no-copies) the same with the .grad copies kept, as
   for the runs of the checks that read them. Bare and spied runs alternate (which goes first
   rotates too), median of --repeat rounds. Goal <= 1.15x on small, <= 1.05x on medium, for
   the ordinary run. On the CPU also each arm's minor page faults, which a large run's CPU
   time follows whatever the arm (docs/bench.md, "Tracking instead of summing"): the timed
   rounds run under a steady heap (measure.steady_heap: glibc's malloc maps nothing of its own
   and gives nothing back), so that after the first round no run faults.
2. memory: the bytes the spy's records and the gradient trace keep, against the bare run's peak
   (RSS high-water on the CPU, torch.cuda.max_memory_allocated on CUDA) and the spied runs' peaks,
   from one untimed run of each arm before the timed rounds (the steady heap holds the
   high-water mark up).
3. the oracle's time (view + expectations + compare) and where the gate's time inside train()
   goes (breakdown.py), from an untimed spied run first, which also warms the process up.

For small also: the recording memory at vocabulary 256 vs 32000 (goal: within 10%) and the
wall time of `python -m harness verify` (goal < 60 s). Set OMP_NUM_THREADS=1 for stable
numbers on the CPU (nox -s bench does). Exit 0, or 2 for a usage error (e.g. --device cuda
without a CUDA device).

`--live` also measures, after the gate's figures, what the live check (harness/live/) costs a GRPO run of the
medium model, side by side with the bare run (bench/live.py, docs/live.md), and ends with one line holding both
ratios against their goals; the gate's --size is then medium unless given.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from harness import needs

from .measure import duration, machine_line
from .sizes import Size, declared

GOALS = {"small": 1.15, "medium": 1.05, "large": 1.05}
MIB = 1 << 20
GIB = 1 << 30


def _bytes(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def verify_wall_time() -> tuple[float, int]:
    """Wall time and exit code of `python -m harness verify` in a subprocess (the venv is already there)."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        code = subprocess.call(
            [sys.executable, "-m", "harness", "verify", "--report-dir", out],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return time.perf_counter() - start, code


def _count(n: float) -> str:
    return f"{n / 1e3:.0f}k" if n >= 1e4 else f"{n:.0f}"


def _median(values) -> float:
    return statistics.median(list(values))


def _ratio_line(label: str, bare: list, spied: list, oracle: list, goal: float | None) -> tuple[str, float]:
    """`wall  bare 36.0 s | spied 36.4 s + checked 2 ms | ratio 1.011x (pairs 0.99-1.03x)` and the ratio;
    `goal` None: no goal is printed."""
    b, t, o = _median(bare), _median(spied), _median(oracle)
    ratio = (t + o) / b
    pairs = sorted((ts + os_) / bs for bs, ts, os_ in zip(bare, spied, oracle))
    spread = f"pairs {pairs[0]:.3f}-{pairs[-1]:.3f}x" if len(pairs) > 1 else "one pair"
    goal_text = "" if goal is None else f"; goal <= {goal}x"
    line = (
        f"{label:<5} bare {duration(b)} | spied {duration(t)} + checked {duration(o)} = {duration(t + o)}"
        f" | ratio {ratio:.3f}x ({spread}{goal_text})"
    )
    return line, ratio


def _overhead(bare: list, gate: list, goal: float | None, cuda: bool, key: str, figures: dict) -> list[str]:
    """The wall (and on the CPU the CPU-time) ratio lines of `gate` against `bare`, pair by pair; the ratios
    go into `figures` as `ratio_wall{key}`, `ratio_cpu{key}`."""
    lines = []
    for clock in ("wall",) if cuda else ("wall", "cpu"):
        line, figures[f"ratio_{clock}{key}"] = _ratio_line(
            clock,
            [getattr(r.train, clock) for r in bare],
            [getattr(g.train, clock) for g in gate],
            [getattr(g.oracle, clock) for g in gate],
            goal,
        )
        lines.append(line)
    if not cuda:  # the CPU time follows the page faults: a ratio whose arms faulted unequally is partly theirs
        faults = [[r.train.faults for r in bare], [g.train.faults for g in gate]]
        cpu = [[r.train.cpu for r in bare], [g.train.cpu for g in gate]]
        figures[f"faults_bare{key}"], figures[f"faults_spied{key}"] = (_median(f) for f in faults)
        lines.append(
            f"faults bare {_count(_median(faults[0]))} | spied {_count(_median(faults[1]))} minor page faults "
            f"(medians; runs {_runs(cpu[0], faults[0])} and {_runs(cpu[1], faults[1])}, CPU s/faults): a large "
            "run's CPU time follows them, whatever the arm"
        )
    return lines


def _runs(cpu: list[float], faults: list[int]) -> str:
    return ", ".join(f"{c:.2f} s/{_count(f)}" for c, f in zip(cpu, faults))


def bench(size: Size, device: str, dtype: str, repeat: int, seed: int, copies: bool = True) -> dict:
    """Measure `size` and print the figures; returns them. `copies`: also the spied run that keeps the steps'
    .grad copies (the runs of gradient_partition, gradient_decomposition and verify-dist)."""
    import torch

    from harness.targets import resolve

    from .breakdown import PIECES, clocked
    from .measure import Clock, PeakMemory, bare_run, gate_run, steady_heap

    oracle = declared("oracle")

    cuda = device.startswith("cuda")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # as verify_gpu runs
        torch.backends.cudnn.allow_tf32 = False
    factory = resolve(size.target).factory
    spec = size.spec.with_(device=device, dtype=dtype, seed=seed)
    memory, clock = PeakMemory(device), Clock(device)
    goal = GOALS[size.name]
    print(f"bench {size.name} | {device} {dtype} | {machine_line(device)}")
    if size.meant_for != device:
        print(f"note       size {size.name} is meant for {size.meant_for}; this run is on {device}")
    model = size.shape.describe() if size.shape else "the toy world's 2-layer Llama (hidden 32)"
    rows = spec.expected_rows()

    started = time.perf_counter()
    for _ in range(size.warmup):  # untimed: lazy imports, the trainer's source parsed once, CUDA context
        gate_run(factory, spec, memory, clock, oracle)
    with clocked(device) as pieces:  # untimed: says where the gate's own time goes
        profiled = gate_run(factory, spec, memory, clock, oracle)
    params = f"{profiled.params / 1e6:.1f}M" if profiled.params >= 1e6 else f"{profiled.params / 1e3:.1f}k"
    print(
        f"model      {model}, vocab {spec.vocab_size}: {params} trainable parameters"
        f" (policy + value); responses of {spec.response_length} tokens, {spec.local_batch_size}"
        f" rows, micro-batches {rows}, {spec.steps_per_update} optimizer steps"
    )

    arms = {
        "bare": lambda: bare_run(factory, spec, memory, clock),
        "spied": lambda: gate_run(factory, spec, memory, clock, oracle),
        **({"copies": lambda: gate_run(factory, spec, memory, clock, oracle, copies=True)} if copies else {}),
    }
    # memory: one untimed run of each arm (the profiled run is the spied one) under the allocator's own settings,
    # before the steady heap below keeps what every run frees and so holds the process's high-water mark up
    weighed = {"spied": profiled, **{name: arms[name]() for name in arms if name != "spied"}}
    if not cuda:
        print(steady_heap())
    runs: dict[str, list] = {name: [] for name in arms}
    names = list(arms)
    for i in range(repeat):  # one run of each arm per round; which goes first rotates from round to round
        for name in names[i % len(names) :] + names[: i % len(names)]:
            runs[name].append(arms[name]())

    bare, gate = runs["bare"], runs["spied"]
    figures: dict = {}
    lines = _overhead(bare, gate, goal, cuda, "", figures)
    print(f"overhead   {lines[0]}")
    for line in lines[1:]:
        print(f"           {line}")
    if copies:
        print("           with the .grad copies kept (the runs of the checks that read them):")
        for line in _overhead(bare, runs["copies"], None, cuda, "_copies", figures):
            print(f"           {line}")
    arms_said = ", ".join(("bare", "spied+checked", "spied with the .grad copies+checked")[: len(names)])
    print(f"           median of {repeat} rounds, the runs of a round in rotating order ({arms_said})")

    last = gate[-1]
    bare_peak, bare_before = weighed["bare"].peak, weighed["bare"].before

    def peak(name: str) -> str:
        high = weighed[name].peak
        return f"{_bytes(high)} ({(high - bare_peak) / max(bare_peak, 1):+.1%})"

    kept = f", {_bytes(weighed['copies'].grad_trace_bytes)} with them" if copies else ""
    print(
        f"memory     spy records {_bytes(last.record_bytes)} ({last.records} records)"
        f" + gradient trace {_bytes(last.grad_trace_bytes)} without the .grad copies{kept} ({last.steps} steps)"
        f" | bare peak {_bytes(bare_peak)} ({memory.what}; {_bytes(bare_peak - bare_before)} above the"
        f" built run) | spied peak {peak('spied')}"
        + (f" | with the copies {peak('copies')}" if copies else "")
        + " (one untimed run each, before the steady heap)"
    )
    clock_of = (lambda stamp: stamp.wall) if cuda else (lambda stamp: stamp.cpu)
    kind = "wall" if cuda else "CPU"
    b = _median(clock_of(r.train) for r in bare)
    o = _median(clock_of(g.oracle) for g in gate)
    verdicts = ", ".join(f"{n} {s}" for s, n in sorted(last.statuses.items()))
    problems = f"; mask problems: {len(last.problems)}" if last.problems else ""
    print(
        f"oracle     {duration(o)} {kind} = view {duration(_median(clock_of(g.view) for g in gate))}"
        f" + expectations {duration(_median(clock_of(g.expect) for g in gate))}"
        f" + compare {duration(_median(clock_of(g.compare) for g in gate))}"
        f" ({o / b:.2%} of the bare run); {sum(last.statuses.values())} metrics: {verdicts}{problems}"
    )
    print(
        f"profile    the gate's pieces in one untimed spied run, no .grad copies ({kind} time; % of the median"
        " bare run's):"
    )
    table = [(p, pieces.seconds[p], pieces.calls[p], PIECES[p]) for p in PIECES if p != "record"]
    table.insert(4, ("spy other", pieces.spy_other(), pieces.calls["record"], "the rest of the spy's record step"))
    table.append(("oracle", clock_of(profiled.oracle), 1, "view, masks, expectations, compare"))
    for piece, seconds, calls, what in table:
        print(f"  {piece:<18}{duration(seconds):>10} {seconds / b:7.2%} {calls:5d} calls  {what}")
    total = pieces.gate_train_s() + clock_of(profiled.oracle)
    print(f"  {'total':<18}{duration(total):>10} {total / b:7.2%}")
    print(f"wall       {time.perf_counter() - started:.0f} s for {size.warmup + len(names) + len(names) * repeat} runs")
    return figures


def small_extras(device: str, verify: bool = True) -> None:
    """The small size's older figures: recording memory against the vocabulary, the verify gate's wall time (unless
    not `verify`)."""
    from harness.targets import resolve

    from .measure import recording_bytes

    SMALL = declared("sizes")["small"]

    factory = resolve(SMALL.target).factory
    small, large = (recording_bytes(factory, SMALL.spec.with_(vocab_size=v, device=device)) for v in (256, 32000))
    print(f"recording  vocab 256: {small} B | vocab 32000: {large} B | ratio {large / small:.3f} (goal within 10%)")
    if device == "cpu" and verify:
        wall, code = verify_wall_time()
        print(f"verify     wall {wall:.1f} s, exit {code} (goal < 60 s)")


def main(argv: list[str] | None = None) -> int:
    sizes = declared("sizes")  # the algorithm's (harness/algorithms/ppo/bench.py): its spec imports Hypothesis
    parser = argparse.ArgumentParser(
        prog="python -m harness.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(sizes), default=None, help="default: small (medium with --live)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the runs train (default cpu)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="the dtype the runs train in (default float32)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=None, help="timed pairs (default: the size's own)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the seed of the runs (models, prompts, sampling; default 0)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="run a size on a device it is not meant for")
    parser.add_argument(
        "--no-copies",
        action="store_true",
        help="leave out the spied run that keeps the steps' .grad copies (a third of the timed runs)",
    )
    parser.add_argument("--no-verify", action="store_true",
                        help="small: leave out the wall time of `python -m harness verify` (a whole gate's process)")
    parser.add_argument(
        "--live", action="store_true", help="also: the live check's overhead on the medium GRPO run (bench/live.py)"
    )
    parser.add_argument("--live-every", type=int, default=20, help="with --live: one interval in LIVE_EVERY")
    parser.add_argument(
        "--live-steps",
        type=int,
        default=None,
        help="with --live: also train LIVE_STEPS steps bare and live-checked, end to end",
    )
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    small = (args.size or ("medium" if args.live else "small")) == "small"
    # what the run imports (one line naming it, from harness/bench/__main__.py): torch; on the CPU, the small
    # size's figures end with the wall time of `python -m harness verify`, whose PPO gate draws its partitions with
    # Hypothesis (the `gate` extra)
    needs.require("torch", *(("hypothesis",) if small and args.device == "cpu" else ()))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"python -m harness.bench: --device cuda, but torch {torch.__version__} sees no CUDA device",
            file=sys.stderr,
        )
        return 2
    size = sizes[args.size or ("medium" if args.live else "small")]
    if size.meant_for == "cuda" and args.device == "cpu" and not args.force:
        print(
            f"python -m harness.bench: --size {size.name} is meant for CUDA (three 1.1B models: ~50 GB in float32);"
            " use --device cuda, or --force to run it on the CPU anyway",
            file=sys.stderr,
        )
        return 2
    gate = bench(size, args.device, args.dtype, args.repeat or size.repeat, args.seed, copies=not args.no_copies)
    if size.name == "small":
        small_extras(args.device, verify=not args.no_verify)
    if args.live:
        from .live import GOAL as LIVE_GOAL
        from .live import bench_live

        print()
        live = bench_live(args.device, args.repeat or 2, args.live_every, args.live_steps)
        clock = "wall" if args.device == "cuda" else "cpu"
        print(f"\nboth       gate ({size.name}, ordinary run) {gate[f'ratio_{clock}']:.3f}x {clock} (goal <= "
              f"{GOALS[size.name]}x) | live, one interval in {args.live_every}: {live['live_ratio']:.4f}x {clock} "
              f"(goal <= {LIVE_GOAL}x)")  # fmt: skip
    return 0
