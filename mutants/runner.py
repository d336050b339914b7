"""The curated runner: each catalogue mutant, applied to a scratch copy of the project, against the gate.

For every mutant: copy `reference_trainers/`, `reference_ppo/`, `harness/` and `pyproject.toml`
into a fresh temporary folder, apply the patch there, and run
`python -m harness verify --target reference` in that folder with
PYTHONPATH pointing at it (so that the scratch copy's `reference_trainers` is the one
imported; the runner checks this once per session, and after every forked run). On Linux
each run (`verify`, and `verify-dist`, whose ranks are forked from it in turn) is a child
forked from one gate server that imported torch, transformers, accelerate and the
harness once but no trainer (harness_run.py, gate_client.py, gate_server.py): the same run, without each
run's seconds of imports; `fork=False` (`--no-fork`) starts a fresh process for every run
instead. The verdict comes from the
run's exit code and its `verify.json`:

- killed: exit 1 and at least one check the mutant names (`killed_by`) failed;
- killed by unnamed checks: exit 1, but none of the named checks failed;
- survived: exit 0;
- error: exit 2, a crash, a timeout, a missing or unreadable verify.json, a patch
  that no longer applies;
- not run: a mutant whose command (`verify-dist`) this checkout does not have.

Only "killed" and "not run" pass the session.

Test selection: by default each mutant runs only the checks it names
(`--check ID`), which keeps the whole catalogue at about one verify start-up per mutant.
Every session also runs the *full* suite once, on the unmodified copy (the
control): a kill means something only if the same checks pass without the
mutant, and the control proves the scratch copy, the gate and the import path
work. `--full` runs the full suite for every mutant instead and records every
check that fails, named or not (the kill matrix of the report).

The gate's run in a scratch copy is in harness_run.py, the verdict in verdicts.py,
the controls in controls.py; this module runs the mutants and the controls together.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import catalogue
from .catalogue import Mutant
from .controls import CONTROLS, control_name, has_command, run_control
from .curated_output import print_summary, write_curated_json
from .gate_client import TRAINER_PACKAGES, GateServer, can_fork, log_tail
from .harness_run import run_harness
from .model import ControlResult, CuratedResult, CuratedRun, CuratedStatus
from .project import ROOT, copy_project
from .verdicts import diagnosed_classes, judge


def run_mutant(
    mutant: Mutant, full: bool, timeout: float, keep: Path | None = None, server: GateServer | None = None
) -> CuratedResult:
    """Copy, patch and verify one mutant (its run forked from `server` when given one)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"ppo-mutant-{mutant.id}-"))
    try:
        copy_project(scratch)
        diff = ""
        try:
            diff = catalogue.diff(mutant, scratch)
            catalogue.apply(mutant, scratch)
        except catalogue.PatchError as exc:
            return CuratedResult(mutant, CuratedStatus.ERROR, reason=str(exc), diff=diff)
        if not has_command(mutant.command, scratch):
            why = "needs verify_dist: this checkout has no `python -m harness verify-dist` (harness/dist.py)"
            return CuratedResult(mutant, CuratedStatus.NOT_RUN, reason=why, diff=diff)
        selection = [] if full or mutant.command != "verify" else catalogue.test_selection(mutant)
        # the server's harness is the unpatched one: a patch of anything but a trainer runs in a fresh process
        own = server if patches_only_trainers(mutant) else None
        outcome = run_harness(scratch, mutant.command, selection, timeout, mutant.target, own)
        verdict = judge(mutant, outcome)
        log = "\n" + log_tail(outcome.log) if verdict.status is CuratedStatus.ERROR else ""
        return CuratedResult(
            mutant,
            verdict.status,
            failed_checks=tuple(outcome.failed),
            named_failed=verdict.named_failed,
            selection=" ".join(selection) or "full suite",
            seconds=outcome.seconds,
            reason=verdict.reason + log,
            diff=diff,
            diagnosed_classes=diagnosed_classes(outcome.checks),
        )
    finally:
        if keep is not None:
            shutil.copytree(scratch, keep / mutant.id, dirs_exist_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)


def patches_only_trainers(mutant: Mutant) -> bool:
    """Whether `mutant` patches only the trainer packages, which the gate server never imports."""
    return all(Path(rep.file).parts[0] in TRAINER_PACKAGES for rep in mutant.patch)


def selected_mutants(ids: list[str] | None) -> list[Mutant] | None:
    """The catalogue (or `ids`) to run, or None after printing why it cannot run."""
    try:
        mutants = catalogue.by_id(ids)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return None
    problems = catalogue.check_metadata()
    if problems:
        print("error: the catalogue is incomplete:\n  " + "\n  ".join(problems), file=sys.stderr)
        return None
    return mutants


def run_all(
    mutants: list[Mutant], full: bool, jobs: int, timeout: float, keep: Path | None, fork: bool = True
) -> tuple[list[CuratedResult], dict[str, ControlResult]]:
    """Run the controls and the mutants in a pool of `jobs` threads; (results in catalogue order, controls).

    With `fork` (and where gate_client.can_fork), every run is forked from one gate server.
    """
    server = GateServer() if fork and can_fork() else None
    try:
        return _run_all(mutants, full, jobs, timeout, keep, server)
    finally:
        if server is not None:
            server.close()


def _run_all(
    mutants: list[Mutant], full: bool, jobs: int, timeout: float, keep: Path | None, server: GateServer | None
) -> tuple[list[CuratedResult], dict[str, ControlResult]]:
    """run_all's pool, its runs forked from `server` when there is one."""
    from tqdm.auto import tqdm  # the progress bar only: the runner's verdicts and records import without it

    results: list[CuratedResult] = []
    # each algorithm of the selection's whole gate, and the two-process run where a mutant is judged under it
    wanted = {control_name("verify", m.algorithm) for m in mutants}
    wanted |= {control_name(m.command, m.algorithm) for m in mutants if has_command(m.command)}
    commands = [name for name in CONTROLS if name in wanted] or ["verify"]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        control_futures = {pool.submit(run_control, timeout, command, server): command for command in commands}
        futures = {pool.submit(run_mutant, m, full, timeout, keep, server): m for m in mutants}
        try:
            with tqdm(
                total=len(futures) + len(control_futures), desc="curated mutants", unit="run", file=sys.stderr
            ) as bar:
                for future in as_completed([*control_futures, *futures]):
                    if future in control_futures:
                        bar.set_postfix_str(
                            f"control {control_futures[future]} " + ("pass" if future.result().passed else "FAIL")
                        )
                    else:
                        r = future.result()
                        results.append(r)
                        bar.set_postfix_str(f"{r.id}: {r.status.text}")
                    bar.update(1)
        except BaseException:
            # Ctrl-C does not reach the forked runs (each has a process group of its own): ending the
            # server ends them, and every run still queued, so the pool's threads return at once
            if server is not None:
                server.close()
            raise
    controls = {command: future.result() for future, command in control_futures.items()}
    order = {m.id: i for i, m in enumerate(mutants)}
    results.sort(key=lambda r: order[r.id])
    return results, controls


def run_curated(
    ids: list[str] | None = None,
    full: bool = False,
    jobs: int | None = None,
    timeout: float = 900.0,
    report_dir: Path = ROOT / "reports",
    keep: Path | None = None,
    fork: bool = True,
) -> int:
    """Run the catalogue (or `ids`), print the table, write reports/curated.json. Exit 0, 1 or 2.

    `fork=False` runs every gate as a fresh process (the verdicts are the same; it costs each run its imports).
    """
    mutants = selected_mutants(ids)
    if mutants is None:
        return 2
    jobs = jobs or max(1, min(4, os.cpu_count() or 1))
    started = time.perf_counter()
    results, controls = run_all(mutants, full, jobs, timeout, keep, fork)
    wall = time.perf_counter() - started
    print_summary(results, controls, jobs, wall)
    finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run = CuratedRun(controls, tuple(results), full, jobs, wall, finished, catalogue.NOT_APPLICABLE)
    write_curated_json(report_dir, run)
    ok = all(c.passed for c in controls.values()) and all(r.passed for r in results)
    return 0 if ok else 1
