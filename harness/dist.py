"""The gate across data-parallel ranks: `python -m harness verify-dist`.

The parent launches N CPU processes (torch.distributed.run, gloo through
accelerate); each rank runs the target's algorithm's `rank_specs` under the spy
and saves what it saw (its `Ran`). The parent then hands every rank's runs to
the algorithm's `rank_checks`, which pool them in the oracle. Started and
stopped here; a run that outlives its timeout is killed.

Worker entry point: `python -m harness.dist --worker ...` (used by the parent).
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


def algorithm_of(target: str):
    """The algorithm object of `target` (its `rank_specs` and `rank_checks` drive the run)."""
    from .algorithms import get
    from .targets import resolve

    return get(resolve(target).algorithm)


# ---------------------------------------------------------------- worker side


def worker(target: str, seed: int, out: Path) -> int:
    """One rank: run every dist scenario (under the spy where the algorithm reads it), save what it saw."""
    import torch

    from .instrument.observe import observe
    from .targets import resolve

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        factory = resolve(target).factory
        algorithm = algorithm_of(target)
        for name, spec in algorithm.rank_specs(seed).items():
            # with the steps' .grad copies: the check across ranks compares them (gradient_ranks.py)
            obs = observe(factory, algorithm.for_rank(spec, rank, world), spy=algorithm.spy, copies=True)
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


def launch(args: argparse.Namespace, out: Path) -> tuple[int, str]:
    """Run the ranks; (exit code, their output). Kills the whole process tree on timeout."""
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

    if args.processes < 2:
        print("error: --processes must be at least 2", file=sys.stderr)
        return 2
    if extra:
        print(f"error: verify-dist does not take {' '.join(extra)}", file=sys.stderr)
        return 2
    try:
        algorithm = algorithm_of(args.target)
    except HarnessConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = Report(target=args.target, device="cpu", seed=args.seed, dtype="float32", algorithm=algorithm.name)
    with tempfile.TemporaryDirectory(prefix="ppo-dist-") as tmp:
        code, output = launch(args, Path(tmp))
        if code == WORKER_CONFIG_ERROR or (code and "configuration error" in output):
            print(output[-4000:], file=sys.stderr)
            return 2
        if code:
            why = f"timed out after {args.timeout:.0f}s" if code == -1 else f"exited with {code}"
            report.add(run_failed(f"the {args.processes}-process run {why}: {root_cause(output)}"))
            print(output[-4000:], file=sys.stderr)
        else:
            runs = {name: load_ranks(Path(tmp), name, args.processes) for name in algorithm.rank_specs(args.seed)}
            for result in algorithm.rank_checks(runs):
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
    from .report import JSON_NAME
    from .report.terminal import render_terminal
    from .verdict import CheckStatus

    out = Path(report_dir) / "dist"
    report.write(out)
    print(render_terminal(report, verbose=True))
    print(f"report: {out / JSON_NAME}")
    return 0 if report.status is CheckStatus.PASS else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.dist")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    return worker(args.target, args.seed, args.out)


if __name__ == "__main__":
    sys.exit(main())
