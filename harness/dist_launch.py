"""How verify-dist starts its ranks (`--launch`), waits for them and stops them: forked from the parent, or as fresh
interpreters by torch.distributed.run (harness/dist.py says when each is the default). Each rank runs
`harness.dist_worker.worker`."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .dist_worker import worker
from .errors import HarnessConfigError


def assignments(args: argparse.Namespace) -> list[str]:
    """The `--set KEY=VALUE` assignments every rank's runs take."""
    return list(getattr(args, "settings", None) or [])


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


def forked_rank(rank: int, env: dict[str, str], target: str, seed: int, out: Path, log: Path,
                settings: Sequence[str] = ()) -> None:  # fmt: skip
    """In a forked child: rank `rank` of the run, as torch.distributed.run would start it; exits with its code."""
    import torch

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank))
    torch.set_num_threads(1)  # OMP_NUM_THREADS is read when torch loads, in the parent: say it again
    sys.exit(worker(target, seed, out, settings))


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
    given = assignments(args)
    ranks = [
        context.Process(target=forked_rank, args=(r, env, args.target, args.seed, out, logs[r], given), name=f"rank{r}")
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
        "-m", "harness.dist_worker", "--worker", "--target", args.target, "--seed", str(args.seed), "--out", str(out),
        *(f"--set={setting}" for setting in assignments(args)),
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
