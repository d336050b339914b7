"""The gate across data-parallel ranks: `python -m harness verify-dist`.

The parent launches N CPU processes (gloo through accelerate); each rank runs the
target's algorithm's `rank_specs` under the spy and saves what it saw (its `Ran`).
The parent then hands every rank's runs to the algorithm's `rank_checks`, which
pool them in the oracle. Started and stopped here; a run that outlives its
timeout is killed.

How the ranks start (`--launch`):

- `fork` (the default where the system can fork and the parent runs one thread):
  the parent has imported torch, transformers, accelerate and the target to learn
  its algorithm; each rank is a child forked from it, with the environment
  torch.distributed.run would give it (RANK, LOCAL_RANK, WORLD_SIZE,
  LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS=1,
  ACCELERATE_USE_CPU) and one intra-op thread, its output in a file of its own.
  This saves each rank the interpreter's start-up and those imports (about 5 CPU
  seconds a rank; the launcher's interpreter another 2). As torch.distributed.run
  does, the first rank that fails ends the others.
- `torchrun`: `python -m torch.distributed.run --standalone` starts fresh
  interpreters (`python -m harness.dist --worker ...`, the worker entry point).
  The default where forking is not possible, or where importing the target
  started a thread (a fork copies one thread only: a lock another held would stay
  held in the ranks).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .errors import HarnessConfigError

WORKER_CONFIG_ERROR = 2
DIST_RUN = "dist_run"
"""The id of the check that stands for the launch itself (it fails when the ranks do not finish)."""


def resolved(target: str):
    """(`target`'s factory, its algorithm object), the target resolved once: the algorithm's `rank_specs` and
    `rank_checks` drive the run."""
    from .algorithms import get
    from .targets import resolve

    found = resolve(target)
    return found.factory, get(found.algorithm)


# ---------------------------------------------------------------- worker side


def worker(target: str, seed: int, out: Path) -> int:
    """One rank: run every dist scenario (under its algorithm's instruments), save what it saw."""
    import torch

    from .instrument.observe import observe

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        factory, algorithm = resolved(target)
        for name, spec in algorithm.rank_specs(seed).items():
            # with the steps' .grad copies: the check across ranks compares them (gradient_ranks.py)
            obs = observe(factory, algorithm.for_rank(spec, rank, world), copies=True)
            ran = obs.ran if obs.ran is None else dataclasses.replace(obs.ran, networks=None)  # no model copies
            torch.save(ran, out / f"{name}-rank{rank}.pt")
        shut_down_process_group()  # on success only: a rank that raised must not wait for the others
    except HarnessConfigError as exc:
        print(f"rank {rank}: configuration error: {exc}", file=sys.stderr)
        return WORKER_CONFIG_ERROR
    return 0


def shut_down_process_group() -> None:
    """Wait for every rank, then tear the process group down before the interpreter exits.

    Left to interpreter shutdown, gloo's threads can outlive their owner and abort the
    process ("terminate called without an active exception"), now and then.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# ---------------------------------------------------------------- parent side


PRELOAD = (
    "torch",
    "torch.distributed",
    "accelerate",
    "transformers",
    "transformers.models.auto.modeling_auto",
    "transformers.models.llama.modeling_llama",  # the toy models' architecture
    "harness.instrument.observe",
)
"""What the parent imports before it forks the ranks: what every rank imports (the target itself is imported already,
to learn its algorithm)."""


def fork_refused() -> str:
    """Import PRELOAD; why this process cannot fork the ranks then ("" when it can): no fork on this system, an
    import that failed, or threads running."""
    import importlib
    import multiprocessing
    import threading

    if "fork" not in multiprocessing.get_all_start_methods():
        return "this system cannot fork"
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"cannot import {name} ({exc})"
    if threading.active_count() > 1:
        return f"threads are running ({', '.join(t.name for t in threading.enumerate())})"
    tasks = "/proc/self/task"  # native threads too, where the system lists them
    if os.path.isdir(tasks) and len(os.listdir(tasks)) > 1:
        return f"{len(os.listdir(tasks)) - 1} native thread(s) are running"
    return ""


def launch(args: argparse.Namespace, out: Path) -> tuple[int, str]:
    """Run the ranks as `args.launch` says (None: fork where fork_refused says nothing); (exit code, their
    output), the exit code -1 when the run timed out."""
    how = getattr(args, "launch", None)
    refused = fork_refused() if how != "torchrun" else ""
    if how == "fork" and refused:
        raise HarnessConfigError(f"--launch fork: {refused}")
    if how is None and refused:
        print(f"verify-dist: the ranks start with torch.distributed.run: {refused}", file=sys.stderr)
    if how == "torchrun" or refused:
        return launch_torchrun(args, out)
    return launch_forked(args, out)


def free_port() -> int:
    """A TCP port free on the loopback interface now (rank 0's store binds it a moment later)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def forked_rank(rank: int, env: dict[str, str], target: str, seed: int, out: Path, log: Path) -> None:
    """In a forked child: rank `rank` of the run, as torch.distributed.run would start it; exits with its code."""
    import torch

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank))
    torch.set_num_threads(1)  # OMP_NUM_THREADS is read when torch loads, in the parent: say it again
    sys.exit(worker(target, seed, out))


def launch_forked(args: argparse.Namespace, out: Path) -> tuple[int, str]:
    """The ranks forked from this process; stops them all at the first that fails, kills them all on timeout."""
    import multiprocessing
    import time
    from multiprocessing.connection import wait

    from .heap import frozen

    world = str(args.processes)
    env = {"WORLD_SIZE": world, "LOCAL_WORLD_SIZE": world, "ROLE_WORLD_SIZE": world, "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}  # fmt: skip
    logs = [out / f"rank{r}.log" for r in range(args.processes)]
    context = multiprocessing.get_context("fork")
    ranks = [
        context.Process(target=forked_rank, args=(r, env, args.target, args.seed, out, logs[r]), name=f"rank{r}")
        for r in range(args.processes)
    ]
    sys.stdout.flush()  # what this process buffered is its own to write, not each rank's
    sys.stderr.flush()
    with frozen():  # each rank's collections skip what it inherits (harness/heap.py)
        for process in ranks:
            process.start()
    deadline = time.monotonic() + args.timeout
    failed: list[str] = []
    timed_out = False
    running = list(ranks)
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        wait([p.sentinel for p in running], timeout=left)
        for process in [p for p in running if not p.is_alive()]:
            running.remove(process)
            process.join()
            if process.exitcode:
                failed.append(f"{process.name} exitcode: {process.exitcode}")
        if failed:
            break  # as torch.distributed.run does: one rank failed, the others may wait for it for ever
    for process in running:
        kill_tree(process.pid)
        process.join()
    output = "".join(log.read_text(encoding="utf-8", errors="replace") for log in logs if log.exists())
    output += "".join(line + "\n" for line in failed)
    if timed_out:
        return -1, output
    codes = [p.exitcode for p in ranks if p.exitcode and p.exitcode > 0]
    return (codes[0] if codes else 1) if failed else 0, output


def launch_torchrun(args: argparse.Namespace, out: Path) -> tuple[int, str]:
    """Run the ranks with torch.distributed.run; (exit code, their output). Kills the whole process tree on
    timeout."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.processes}",
        "-m", "harness.dist", "--worker", "--target", args.target, "--seed", str(args.seed), "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            output = ""
        return -1, output or ""
    return proc.returncode, output or ""


def kill_tree(pid: int) -> None:
    """Kill a process and every descendant (the launcher may put its ranks in groups of their own)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        family = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    for process in family:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=10)


def load_ranks(out: Path, name: str, processes: int) -> list:
    """Every rank's saved `Ran` of run `name`."""
    import torch

    files = [out / f"{name}-rank{r}.pt" for r in range(processes)]
    missing = [str(f.name) for f in files if not f.exists()]
    if missing:
        raise RuntimeError(f"ranks saved nothing for {name}: {', '.join(missing)}")
    return [torch.load(f, weights_only=False) for f in files]


def verify_dist(args: argparse.Namespace, extra: list[str]) -> int:
    """Launch, pool, check, report. 0 pass, 1 a check failed (or the run failed), 2 usage/config."""
    from .report import Report
    from .targets import declared_metrics

    if args.processes < 2:
        print("error: --processes must be at least 2", file=sys.stderr)
        return 2
    if extra:
        print(f"error: verify-dist does not take {' '.join(extra)}", file=sys.stderr)
        return 2
    try:
        factory, algorithm = resolved(args.target)
        declares = declared_metrics(factory)  # the optional metrics the ranks' checks hold it to, as on one process
    except HarnessConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = Report(target=args.target, device="cpu", seed=args.seed, dtype="float32", algorithm=algorithm.name)
    with tempfile.TemporaryDirectory(prefix="ppo-dist-") as tmp:
        try:
            code, output = launch(args, Path(tmp))
        except HarnessConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if code == WORKER_CONFIG_ERROR or (code and "configuration error" in output):
            print(output[-4000:], file=sys.stderr)
            return 2
        if code:
            why = f"timed out after {args.timeout:.0f}s" if code == -1 else f"exited with {code}"
            report.add(run_failed(f"the {args.processes}-process run {why}: {root_cause(output)}"))
            print(output[-4000:], file=sys.stderr)
        else:
            runs = {name: load_ranks(Path(tmp), name, args.processes) for name in algorithm.rank_specs(args.seed)}
            for result in algorithm.rank_checks(runs, declares):
                report.add(result)
    return finish(report, args.report_dir)


def root_cause(output: str) -> str:
    """What the ranks said went wrong, first errors first, then their exit codes (or the last line)."""
    launcher = ("ChildFailedError", "raise ")  # torch.distributed.run's own wrapping, not the cause
    lines = [line.strip() for line in output.splitlines() if not any(word in line for word in launcher)]
    errors = [line for line in lines if any(word in line for word in ("Error:", "error:", "terminate called"))]
    exits = [line for line in lines if "exitcode" in line]
    said = errors[:3] + exits[-2:]
    return " | ".join(said) if said else (lines or ["no output"])[-1]


def run_failed(message: str):
    """The check that stands for the launch itself, failed with `message`."""
    from .verdict import CheckId, CheckResult, CheckStatus

    return CheckResult(CheckId(DIST_RUN), CheckStatus.FAIL, problems=(message,))


def finish(report, report_dir: str) -> int:
    """Write reports/dist/verify.*, print the table; exit 0 only when every check passed."""
    from .report import JSON_NAME, write_report
    from .report.terminal import render_terminal
    from .verdict import CheckStatus

    out = Path(report_dir) / "dist"
    write_report(report, out)
    print(render_terminal(report, verbose=True))
    print(f"report: {out / JSON_NAME}")
    return 0 if report.status is CheckStatus.PASS else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.dist", description="one rank of `python -m harness verify-dist` (it starts them)"
    )
    parser.add_argument("--worker", action="store_true", required=True, help="run as one rank (required)")
    parser.add_argument("--target", required=True, help="the target the rank runs, as verify-dist's --target")
    parser.add_argument("--seed", type=int, default=0, help="the seed of every run (default 0)")
    parser.add_argument("--out", type=Path, required=True, help="the folder the rank saves what it saw to")
    args = parser.parse_args(argv)
    from .heap import no_teardown_walk

    no_teardown_walk()  # a rank's teardown would walk torch's and transformers' objects (harness/heap.py)
    return worker(args.target, args.seed, args.out)


if __name__ == "__main__":
    sys.exit(main())
