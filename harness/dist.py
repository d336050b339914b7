"""The gate across data-parallel ranks: `python -m harness verify-dist`.

The parent launches N CPU processes (torch.distributed.run, gloo through
accelerate); each rank runs the target under the spy and saves what it saw.
The parent then pools every rank's records in the oracle and checks that the
logged metrics equal the pooled value over all ranks, not a mean of per-rank
means. Started and stopped here; a run that outlives its timeout is killed.

Worker entry point: `python -m harness.dist --worker ...` (used by the parent).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .errors import HarnessConfigError

WORKER_CONFIG_ERROR = 2


def dist_specs(seed: int):
    """The three multi-process scenarios: uneven split over two updates (also freshness) and LR 0."""
    from . import scenarios

    return {
        "uneven_split": scenarios.UNEVEN.with_(seed=seed),
        "lr0_ratio": scenarios.LR0.with_(seed=seed),
    }


# ---------------------------------------------------------------- worker side


def worker(target: str, seed: int, out: Path) -> int:
    """One rank: run every dist scenario under the spy, save logs and records for the parent."""
    import torch

    from .runner import observe
    from .targets import resolve

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        factory = resolve(target)
        for name, spec in dist_specs(seed).items():
            obs = observe(factory, spec.with_(rank=rank, world_size=world))
            saved = {
                "logs": obs.logs,
                "records": obs.records,
                "pad": obs.pad_token_id,
                "stop": obs.stop_token_id,
                "scores": obs.scores,
            }
            torch.save(saved, out / f"{name}-rank{rank}.pt")
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


def load_ranks(out: Path, name: str, processes: int) -> list[dict]:
    import torch

    files = [out / f"{name}-rank{r}.pt" for r in range(processes)]
    missing = [str(f.name) for f in files if not f.exists()]
    if missing:
        raise RuntimeError(f"ranks saved nothing for {name}: {', '.join(missing)}")
    return [torch.load(f, weights_only=False) for f in files]


def verify_dist(args: argparse.Namespace, extra: list[str]) -> int:
    """Launch, pool, check, report. 0 pass, 1 a check failed (or the run failed), 2 usage/config."""
    from .report import ReportCollector
    from .targets import resolve

    if args.processes < 2:
        print("error: --processes must be at least 2", file=sys.stderr)
        return 2
    try:
        resolve(args.target)
    except HarnessConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    collector = ReportCollector(target=args.target, device="cpu", seed=args.seed, dtype="float32")
    with tempfile.TemporaryDirectory(prefix="ppo-dist-") as tmp:
        code, output = launch(args, Path(tmp))
        if code == WORKER_CONFIG_ERROR or (code and "configuration error" in output):
            print(output[-4000:], file=sys.stderr)
            return 2
        if code:
            why = f"timed out after {args.timeout:.0f}s" if code == -1 else f"exited with {code}"
            collector.add(run_failed(f"the {args.processes}-process run {why}: {root_cause(output)}"))
            print(output[-4000:], file=sys.stderr)
        else:
            for result in dist_checks(Path(tmp), args.processes):
                collector.add(result)
    return finish(collector, args.report_dir)


def root_cause(output: str) -> str:
    """What the ranks said went wrong, first errors first, then their exit codes (or the last line)."""
    launcher = ("ChildFailedError", "raise ")  # torch.distributed.run's own wrapping, not the cause
    lines = [line.strip() for line in output.splitlines() if not any(word in line for word in launcher)]
    errors = [line for line in lines if any(word in line for word in ("Error:", "error:", "terminate called"))]
    exits = [line for line in lines if "exitcode" in line]
    said = errors[:3] + exits[-2:]
    return " | ".join(said) if said else (lines or ["no output"])[-1]


def run_failed(message: str):
    from .scenarios import CheckResult

    return CheckResult("dist_run", "verify_dist").fail(message)


def finish(collector, report_dir: str) -> int:
    """Write reports/verify_dist.*, print the table; exit 0 only when every check passed."""
    from .report import JSON_NAME

    out = Path(report_dir) / "dist"
    collector.write(out)
    for line in collector.terminal_lines():
        print(line)
    print(f"report: {out / JSON_NAME}")
    return 0 if collector.status == "pass" else 1


# ---------------------------------------------------------------- the checks


def dist_checks(out: Path, processes: int) -> list:
    """uneven_split (update 1), freshness (update 2) and lr0_ratio on the pooled records of every rank."""
    from . import scenarios

    uneven = load_ranks(out, "uneven_split", processes)
    lr0 = load_ranks(out, "lr0_ratio", processes)
    spec = scenarios.UNEVEN
    return [
        pooled_across_ranks(uneven, spec, 0, scenarios.CheckResult("uneven_split[ranks]", "uneven_split")),
        pooled_across_ranks(uneven, spec, 1, scenarios.CheckResult("freshness[ranks]", "freshness")),
        lr0_identities(lr0),
    ]


def pooled_across_ranks(ranks: list[dict], spec, index: int, result):
    """Logged metrics of update `index` against the oracle fed every rank's records of that update."""
    from . import oracle, scenarios

    names = scenarios.POOLED + ("val/ratio_var",) + scenarios.OBJECTIVES
    stop, pad = ranks[0]["stop"], ranks[0]["pad"]
    logs = [r["logs"] for r in ranks]
    if any(len(log) != spec.total_updates for log in logs):
        return result.fail(f"ranks logged {[len(log) for log in logs]} updates, expected {spec.total_updates} each")
    if any(log[index] != logs[0][index] for log in logs[1:]):
        result.fail("ranks logged different values for the same update")
    per_rank = [oracle.split_updates(r["records"]) for r in ranks]
    if any(len(u) != spec.total_updates for u in per_rank):
        return result.fail(f"spy saw {[len(u) for u in per_rank]} updates per rank")
    updates = [u[index] for u in per_rank]
    scores = [r["scores"][index] for r in ranks] if all(r["scores"] for r in ranks) else None
    pooled_scores = None if scores is None else __import__("torch").cat(scores)
    expected = oracle.expected_metrics(updates, stop, pad, spec.kl_coef, spec.kl_estimator, scores=pooled_scores)
    if not ranks_differ(updates, expected, stop, pad, spec, result):
        return result
    return result.absorb(oracle.compare({n: logs[0][index][n] for n in names}, {n: expected[n] for n in names},
                                        spec.dtype))  # fmt: skip


def ranks_differ(updates, pooled, stop, pad, spec, result) -> bool:
    """The scenario has teeth only if a mean of per-rank means differs from the pooled mean."""
    from . import oracle

    counts = [int(oracle.derive_masks(u.responses(), stop, pad)[0].sum()) for u in updates]
    if len(set(counts)) < 2:
        result.fail(f"every rank has {counts[0]} response tokens: a per-rank mean would equal the pooled one")
        return False
    alone = [oracle.expected_metrics([u], stop, pad, spec.kl_coef, spec.kl_estimator) for u in updates]
    name = "policy/entropy_avg"
    mean_of_means = sum(a[name].value for a in alone) / len(alone)
    if abs(mean_of_means - pooled[name].value) < 1e-6:
        result.fail(f"per-rank padding too alike: mean of per-rank {name} equals the pooled one")
        return False
    result.message = f"response tokens per rank {counts}"
    return True


def lr0_identities(ranks: list[dict]):
    from . import oracle, scenarios

    result = scenarios.CheckResult("lr0_ratio[ranks]", "lr0_ratio")
    identities = {"val/ratio": 1.0, "val/ratio_var": 0.0, "policy/approxkl_avg": 0.0, "policy/clipfrac_avg": 0.0}
    logs = ranks[0]["logs"]
    if not logs or any(n not in logs[0] for n in identities):
        return result.fail("the trainer logged no update, or not every identity metric")
    return result.absorb(oracle.compare(logs[0], identities, "float32", kind="identity"))


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
