"""The gate across data-parallel ranks: `python -m harness verify-dist`.

The parent launches N CPU processes (gloo through accelerate); each rank runs the
target's algorithm's `rank_specs` (with `--set`'s settings) under the spy and saves what
it saw (its `Ran`), harness/dist_worker.py. The parent then hands every rank's runs to
the algorithm's `rank_checks`, which pool them in the oracle. A check the target declares
not applicable (`factory.not_applicable`) is reported so, with its reason, and not run,
nor is a run that only such checks read; a run that could not be configured errs the
checks that read it (the algorithm's `rank_reads` says which), the others still run and
report, and the command exits 2 naming them. Started and stopped in
harness/dist_launch.py; a run that outlives its timeout is killed.

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
  interpreters (`python -m harness.dist_worker --worker ...`, the worker entry point, which
  `python -m harness.dist --worker ...` is too).
  The default where forking is not possible, or where importing the target
  started a thread (a fork copies one thread only: a lock another held would stay
  held in the ranks).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from .dist_launch import fork_refused as fork_refused
from .dist_launch import launch
from .dist_worker import ERROR_SUFFIX, WORKER_CONFIG_ERROR, planned_runs, rank_reads, resolved
from .dist_worker import main as main
from .dist_worker import shut_down_process_group as shut_down_process_group
from .errors import HarnessConfigError

DIST_RUN = "dist_run"
"""The id of the check that stands for the launch itself (it fails when the ranks do not finish)."""


def load_ranks(out: Path, name: str, processes: int) -> list:
    """Every rank's saved `Ran` of run `name`."""
    import torch

    files = [out / f"{name}-rank{r}.pt" for r in range(processes)]
    missing = [str(f.name) for f in files if not f.exists()]
    if missing:
        raise RuntimeError(f"ranks saved nothing for {name}: {', '.join(missing)}")
    return [torch.load(f, weights_only=False) for f in files]


def run_error(out: Path, name: str, processes: int) -> str:
    """Why run `name` could not be configured, as the first rank that says so saved it; '' when none did."""
    said = [out / f"{name}-rank{r}{ERROR_SUFFIX}" for r in range(processes)]
    return next((f.read_text(encoding="utf-8") for f in said if f.exists()), "")


def verify_dist(args: argparse.Namespace, extra: list[str]) -> int:
    """Launch, pool, check, report. 0 pass, 1 a check failed (or the run failed), 2 usage/config (a check whose
    run could not be configured, named; nothing verified)."""
    from .report import Report

    if args.processes < 2:
        print("error: --processes must be at least 2", file=sys.stderr)
        return 2
    if extra:
        print(f"error: verify-dist does not take {' '.join(extra)}", file=sys.stderr)
        return 2
    assignments = list(getattr(args, "settings", None) or [])
    try:
        target, algorithm = resolved(args.target)
        settings = algorithm.parse_settings(assignments) if assignments else {}
        runs = planned_runs(target, algorithm, args.processes, args.seed, settings)
    except HarnessConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = Report(target=args.target, device="cpu", seed=args.seed, dtype="float32", algorithm=algorithm.name)
    with tempfile.TemporaryDirectory(prefix="ppo-dist-") as tmp:
        try:
            code, output = launch(args, Path(tmp)) if runs else (0, "")
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
            try:
                for result in rank_results(algorithm, target, Path(tmp), list(runs), args.processes, settings,
                                           report.unconfigured):  # fmt: skip
                    report.add(result)
            except HarnessConfigError as exc:  # an algorithm that does not say which checks read which run
                print(f"error: {exc}", file=sys.stderr)
                return 2
    return finish(report, args.report_dir)


def rank_results(algorithm: Any, target: Any, out: Path, runs: list[str], processes: int, settings: dict,
                 unconfigured: dict[str, str]) -> list:  # fmt: skip
    """The checks of verify-dist in the algorithm's order (`rank_reads`): a check the target declares not applicable
    is so, with its reason; one that reads a run that could not be configured is an error saying why (its id and
    that why added to `unconfigured`); every other from the algorithm's `rank_checks` on the runs that were made."""
    from .report.unconfigured import not_configured
    from .verdict import CheckResult, CheckStatus

    errors = {name: said for name in runs if (said := run_error(out, name, processes))}
    made = {name: load_ranks(out, name, processes) for name in runs if name not in errors}
    extra = {"settings": settings} if settings else {}
    reads = rank_reads(algorithm, processes)
    if reads is None and errors:
        raise HarnessConfigError("; ".join(f"run {name}: {said}" for name, said in errors.items()))
    computed = {str(r.id): r for r in algorithm.rank_checks(made, target, **extra)} if made else {}
    results = []
    for check_id in reads if reads is not None else [r.id for r in computed.values()]:
        reason = target.not_applicable_reason(check_id)
        broken = [name for name in (reads or {}).get(check_id, ()) if name in errors]
        if reason is not None:
            results.append(CheckResult(check_id, CheckStatus.NOT_APPLICABLE, notes=(reason,)))
        elif broken:
            unconfigured[str(check_id)] = said = f"{errors[broken[0]]} (run {broken[0]})"
            results.append(not_configured(check_id, said))
        else:
            results.append(computed[str(check_id)])
    return results


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


NOTHING_VERIFIED = "nothing was verified: none of the {} checks ran (each is not applicable to this target)"
"""The configuration error of a run whose every check is not applicable (exit 2)."""


def finish(report, report_dir: str) -> int:
    """Write reports/dist/verify.*, print the table; exit 0 only when every check passed (or is not applicable), 2
    naming the checks whose run could not be configured, or when no check ran."""
    from .report import JSON_NAME, write_report
    from .report.terminal import render_terminal
    from .report.unconfigured import unconfigured_line
    from .verdict import CheckStatus

    ran = any(c.status in (CheckStatus.PASS, CheckStatus.FAIL) for c in report.checks)
    if report.checks and not ran and not report.unconfigured:
        report.config_errors.append(NOTHING_VERIFIED.format(len(report.checks)))
    out = Path(report_dir) / "dist"
    write_report(report, out)
    print(render_terminal(report, verbose=True))
    print(f"report: {out / JSON_NAME}")
    if report.unconfigured or report.config_errors:
        for line in [*report.config_errors, *([unconfigured_line(report.unconfigured)] if report.unconfigured else [])]:
            print(f"error: {line}", file=sys.stderr)
        return 2
    return 0 if report.status is CheckStatus.PASS else 1


if __name__ == "__main__":
    sys.exit(main())
