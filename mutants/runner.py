"""The curated runner: each catalogue mutant, applied to a scratch copy of the project, against the gate.

For every mutant: copy `reference_ppo/`, `harness/` and `pyproject.toml` into a
fresh temporary folder, apply the patch there, and run
`python -m harness verify --target reference` in that folder with
PYTHONPATH pointing at it (so that the scratch copy's `reference_ppo` is the one
imported; the runner checks this once per session). The verdict comes from the
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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from . import catalogue
from .catalogue import Mutant
from .curated_output import print_summary, write_curated_json
from .model import ControlResult, CuratedResult, CuratedRun, CuratedStatus, Judgement
from .project import ROOT, copy_project, scratch_env

DIST_RUN = "dist_run"  # verify-dist's check for the launch itself


@dataclass
class RunOutcome:
    """One `python -m harness ...` run in a scratch copy."""

    returncode: int | None
    checks: list[dict]
    seconds: float
    log: str
    problem: str = ""

    @property
    def failed(self) -> list[str]:
        """The ids of the checks that failed, named by the mutant or not."""
        return [c["id"] for c in self.checks if c.get("status") == "fail"]


def harness_command(
    command: str, report_dir: Path, selection: list[str] | tuple[str, ...] = (), target: str = "reference"
) -> list[str]:
    """The gate's command line in a scratch copy: verify against a reference trainer, or verify-dist."""
    args = [sys.executable, "-m", "harness", command, "--target", target, "--report-dir", str(report_dir)]
    if command == "verify":
        args += [f"--check={check}" for check in selection]
    return args


def read_checks(report_dir: Path) -> tuple[list[dict], str]:
    """Checks of every JSON report under `report_dir` (verify.json; verify-dist writes dist/verify.json)."""
    files = sorted(report_dir.rglob("*.json"))
    if not files:
        return [], f"no JSON report in {report_dir}"
    checks: list[dict] = []
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            return [], f"{path.name} is unreadable: {exc}"
        found = data.get("checks") if isinstance(data, dict) else None
        if not isinstance(found, list):
            return [], f"{path.name} has no list of checks"
        checks += [c for c in found if isinstance(c, dict) and "id" in c and "status" in c]
    return checks, ""


def run_harness(
    scratch: Path,
    command: str = "verify",
    selection: list[str] | tuple[str, ...] = (),
    timeout: float = 900.0,
    target: str = "reference",
) -> RunOutcome:
    """Run the gate in `scratch` and collect its checks."""
    report_dir = scratch / "_report"
    shutil.rmtree(report_dir, ignore_errors=True)
    report_dir.mkdir()
    log_path = scratch / "_run.log"
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(
                harness_command(command, report_dir, selection, target),
                cwd=scratch,
                env=scratch_env(scratch),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
            code: int | None = proc.returncode
            problem = ""
        except subprocess.TimeoutExpired:
            code, problem = None, f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    text = log_path.read_text(encoding="utf-8", errors="replace")
    checks, unreadable = read_checks(report_dir)
    if code is not None and unreadable and code in (0, 1):
        problem = unreadable
    return RunOutcome(code, checks, seconds, text, problem)


NOTED_CLASS = re.compile(r"\(class (\d+)\)(?:;|$)")
"""A check note's diagnosis: "...: <what it is> (class N)", at the end of a note."""


def diagnosed_class(checks: list[dict]) -> int | None:
    """The class named most often by the diagnoses of the failing metrics in `checks` (verify.json), or None.

    Each class a diagnosis names counts once (a combination counts for both); ties go to the smaller number.
    A failed check whose message carries a diagnosis note ending "(class N)" (the gradient checks') votes too.
    """
    votes: Counter[int] = Counter()
    for check in checks:
        for metric in check.get("metrics", ()):
            diagnosis = metric.get("diagnosis") if metric.get("failed") else None
            votes.update(set((diagnosis or {}).get("classes") or ()))
        if check.get("status") == "fail":
            votes.update({int(n) for n in NOTED_CLASS.findall(check.get("message") or "")})
    if not votes:
        return None
    return min(votes, key=lambda c: (-votes[c], c))


def judge(mutant: Mutant, outcome: RunOutcome) -> Judgement:
    """The verdict on one mutant's run: a kill is exit 1 with a check the mutant names among the failures."""
    failed = outcome.failed
    if mutant.command == "verify-dist" and catalogue.VERIFY_DIST in mutant.killed_by:
        if DIST_RUN in failed:  # the processes themselves failed: a crash, not a kill
            return Judgement(CuratedStatus.ERROR, (), f"the two-process run failed ({DIST_RUN})")
        named = tuple(failed)
    else:
        wanted = set(catalogue.named_checks(mutant)) | set(mutant.killed_by)
        named = tuple(
            c["id"]
            for c in outcome.checks
            if c.get("status") == "fail" and (c["id"] in wanted or c.get("scenario") in wanted)
        )
    if outcome.problem:
        return Judgement(CuratedStatus.ERROR, named, outcome.problem)
    if outcome.returncode == 0:
        return Judgement(CuratedStatus.SURVIVED, named, "the verify run passed")
    if outcome.returncode == 1:
        if named:
            return Judgement(CuratedStatus.KILLED, named)
        if failed:
            why = f"failed: {', '.join(failed)}; named: {', '.join(mutant.killed_by)}"
            return Judgement(CuratedStatus.KILLED_BY_UNNAMED_CHECKS, named, why)
        return Judgement(CuratedStatus.ERROR, named, "exit 1 but no check failed in the report (a crash?)")
    return Judgement(
        CuratedStatus.ERROR, named, f"exit code {outcome.returncode} (2 is a usage or configuration error)"
    )


def log_tail(text: str, lines: int = 25) -> str:
    """The end of a run's log, enough to say why it erred without the whole of it."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run_mutant(mutant: Mutant, full: bool, timeout: float, keep: Path | None = None) -> CuratedResult:
    """Copy, patch and verify one mutant."""
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
        outcome = run_harness(scratch, mutant.command, selection, timeout, mutant.target)
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
            diagnosed_class=diagnosed_class(outcome.checks),
        )
    finally:
        if keep is not None:
            shutil.copytree(scratch, keep / mutant.id, dirs_exist_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)


GRPO_CONTROL = "verify-grpo"
"""The control of the GRPO mutants: the full GRPO verify suite against `reference-grpo`."""
CONTROLS = {
    "verify": ("verify", "ppo"),
    "verify-dist": ("verify-dist", "ppo"),
    GRPO_CONTROL: ("verify", "grpo"),
    "verify-dist-grpo": ("verify-dist", "grpo"),
}
"""Control name (as curated.json keys it) -> (command, algorithm) run on the unmodified copy."""


def control_name(command: str, algorithm: str) -> str:
    """The control a mutant of `algorithm` run under `command` is judged beside."""
    return next(name for name, key in CONTROLS.items() if key == (command, algorithm))


def run_control(timeout: float, command: str = "verify") -> ControlResult:
    """The unmodified copy under control `command` (a key of CONTROLS): the full verify suite (or the
    two-process run) of its algorithm, against that algorithm's reference target, must pass."""
    command, algorithm = CONTROLS[command]
    target = catalogue.TARGETS[algorithm]
    scratch = Path(tempfile.mkdtemp(prefix=f"ppo-mutant-control-{command}-{algorithm}-"))
    try:
        copy_project(scratch)
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import reference_ppo.trainer as t, harness; print(t.__file__); print(harness.__file__)",
            ],
            cwd=tempfile.gettempdir(),
            env=scratch_env(scratch),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        paths = probe.stdout.split()
        if (
            probe.returncode != 0
            or len(paths) != 2
            or not all(Path(p).resolve().is_relative_to(scratch.resolve()) for p in paths)
        ):
            return ControlResult(
                False, 0.0, 0, f"the scratch copy is not what gets imported: {probe.stdout}{probe.stderr}"
            )
        outcome = run_harness(scratch, command, "", timeout, target)
        if outcome.problem or outcome.returncode != 0:
            why = outcome.problem or f"exit code {outcome.returncode}, failed: {', '.join(outcome.failed) or 'none'}"
            return ControlResult(
                False, outcome.seconds, len(outcome.checks), f"{command}: {why}\n{log_tail(outcome.log)}"
            )
        ids = {c["id"] for c in outcome.checks}
        missing = sorted(set(catalogue.ALGORITHM_CHECKS[algorithm]) - ids) if command == "verify" else []
        if missing:
            return ControlResult(False, outcome.seconds, len(ids), f"the gate no longer reports check(s) {missing}")
        return ControlResult(True, outcome.seconds, len(ids))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def has_command(command: str, root: Path = ROOT) -> bool:
    """Whether the checkout under `root` has `command` (verify-dist needs harness/dist.py, which may be absent)."""
    return command == "verify" or (root / "harness" / "dist.py").is_file()


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
    mutants: list[Mutant], full: bool, jobs: int, timeout: float, keep: Path | None
) -> tuple[list[CuratedResult], dict[str, ControlResult]]:
    """Run the controls and the mutants in a pool of `jobs` threads; (results in catalogue order, controls)."""
    from tqdm.auto import tqdm  # the progress bar only: the runner's verdicts and records import without it

    results: list[CuratedResult] = []
    wanted = {control_name(m.command, m.algorithm) for m in mutants if has_command(m.command)}
    commands = ["verify"] + [name for name in CONTROLS if name in wanted and name != "verify"]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        control_futures = {pool.submit(run_control, timeout, command): command for command in commands}
        futures = {pool.submit(run_mutant, m, full, timeout, keep): m for m in mutants}
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
) -> int:
    """Run the catalogue (or `ids`), print the table, write reports/curated.json. Exit 0, 1 or 2."""
    mutants = selected_mutants(ids)
    if mutants is None:
        return 2
    jobs = jobs or max(1, min(4, os.cpu_count() or 1))
    started = time.perf_counter()
    results, controls = run_all(mutants, full, jobs, timeout, keep)
    wall = time.perf_counter() - started
    print_summary(results, controls, jobs, wall)
    finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run = CuratedRun(controls, tuple(results), full, jobs, wall, finished, catalogue.NOT_APPLICABLE)
    write_curated_json(report_dir, run)
    ok = all(c.passed for c in controls.values()) and all(r.passed for r in results)
    return 0 if ok else 1
