"""mutmut 3 over the whole of one trainer: PPO's ppo.py and ppo_config.py, or GRPO's grpo.py and grpo_config.py,
each with common.py (what the two trainers share).

`python -m mutants mutmut [--algorithm ppo|grpo]` never runs mutmut in the project:
mutmut writes its working tree to `./mutants/`, which is this package's own folder.
Instead it

1. copies `reference_trainers/`, `reference_ppo/`, `harness/` and `pyproject.toml` (whose `[tool.mutmut]`
   section is the configuration) to a scratch folder outside the project, plus
   `mutmut_hooks.py` as `ppo_mutmut_hooks.py`, a pytest plugin that the
   configuration loads (see that module for what it does), and sets the scratch
   configuration to the algorithm's files and gate target (mutmut_algorithms.py);
2. keeps a pristine copy of each mutated file under `_pristine/` and refuses a
   `# pragma: no mutate` that is a region or gives no reason (`pragma_problems`):
   a line is left unmutated only where the real source says why, on that line.
   The files are not rewritten, so the report's line numbers are the project's
   (steps 1 and 2: mutmut_scratch.py);
3. runs `mutmut run` there (fork isolation, CPU torch, one thread per worker) with
   the verify suite against the algorithm's reference target as its tests;
4. reads mutmut's meta files (`mutants/reference_trainers/<file>.meta`) and the
   generated functions (`x_<name>__mutmut_<n>`, and `xǁ<Class>ǁ<method>__mutmut_<n>`
   inside their class) and turns each mutant into a record with its file, its
   location in the original file (locate.py), the replaced text, the replacement
   and a unified diff (mutmut_results.json; mutmut_collect.py), each with its triage key (keys.py);
5. judges each mutant whose session exited 2 by what the hooks plugin wrote down: the harness's configuration
   error is "refused" (detected); any other exit 2 is rerun once, serially, and one still exiting 2 is not judged
   (left out of the score, said in one line with the reason).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import mutmut_hooks, selection
from .keys import describe
from .model import MutantRecord, MutantStatus
from .mutmut_algorithms import ALGORITHMS, DEFAULT
from .mutmut_collect import collect, write_results
from .mutmut_scratch import DEFAULT_ALGO, PRISTINE, prepare_scratch, write_rank_links, write_skip_file
from .project import ROOT, scratch_env
from .scoring import load_triage

MUTATED_FILES = DEFAULT_ALGO.files  # the default algorithm's; each algorithm's are in mutmut_algorithms.ALGORITHMS


def mutmut_executable() -> list[str]:
    """The mutmut command: the one beside this interpreter first, so that it runs with the same packages."""
    beside = Path(sys.executable).with_name("mutmut")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("mutmut")
    if found:
        return [found]
    raise RuntimeError("mutmut is not installed: pip install 'mutmut>=3.3,<4' (the `mutation` extra)")


def run_mutmut(
    scratch, max_children: int, timeout: float, log_path, globs=(), skip_file=None, links_file=None, exit2_dir=None
) -> tuple[int, float]:
    """`mutmut run` in `scratch` (over the mutants matching `globs`, all where none); (exit code, seconds).

    With `skip_file`, the mutants it lists as triaged are skipped (mutmut's "skipped", exit 34); with
    `links_file` (mutmut_scratch.write_rank_links), the stats run links the two-process test to its functions.
    Output goes to `log_path`.
    """
    env = scratch_env(scratch)
    env.pop("PYTHONPATH")  # mutmut puts its own ./mutants/ first on the path
    if skip_file is not None:
        env[mutmut_hooks.SKIP_ENV] = str(skip_file)
    if links_file is not None:
        env[mutmut_hooks.LINKS_ENV] = str(links_file)
    if exit2_dir is not None:
        env[mutmut_hooks.EXIT2_ENV] = str(exit2_dir)
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            code = subprocess.run(
                [*mutmut_executable(), "run", "--max-children", str(max_children), *globs],
                cwd=scratch,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.perf_counter() - start


def tail(path, lines: int = 40) -> str:
    """The last non-blank lines of a log, to say why a run failed without printing all of it."""
    text = Path(path).read_text(encoding="utf-8", errors="replace").replace("\r", "\n")
    return "\n".join(line for line in text.splitlines()[-lines:] if line.strip())


EXIT2_DIR = "exit2"  # in the scratch project: the hooks plugin's word on each mutant whose session exited 2


def exit2_reasons(scratch) -> dict[str, dict]:
    """{mutant name: {"configuration": bool, "detail": str}} the hooks plugin wrote for sessions that exited 2."""
    found = {}
    for path in sorted((Path(scratch) / EXIT2_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "name" in data:
            found[str(data["name"])] = data
    return found


def judge_exit2(records: list[MutantRecord], reasons: dict[str, dict]) -> tuple[list[MutantRecord], list[str]]:
    """The records with each exit 2 the plugin saw come from the harness's configuration error made REFUSED
    (detected), and the names of the other exit-2 mutants (no verdict yet: interrupted, collection error)."""
    out, ambiguous = [], []
    for r in records:
        if r.status is MutantStatus.INTERRUPTED:
            if reasons.get(r.name, {}).get("configuration"):
                r = dataclasses.replace(r, status=MutantStatus.REFUSED)
            else:
                ambiguous.append(r.name)
        out.append(r)
    return out, ambiguous


def unjudged_line(records, reasons: dict[str, dict]) -> str | None:
    """One line: how many mutants the run gave no verdict on, and why; None when it judged them all."""
    left = [r for r in records if r.status.unjudged]
    if not left:
        return None
    why: dict[str, int] = {}
    for r in left:
        detail = reasons.get(r.name, {}).get("detail") if r.status is MutantStatus.INTERRUPTED else None
        key = f"{r.status.text} (exit {r.exit_code}{': ' + detail if detail else ''})"
        why[key] = why.get(key, 0) + 1
    said = "; ".join(f"{n} {k}" for k, n in sorted(why.items(), key=lambda kv: -kv[1]))
    return f"mutmut: {len(left)} mutant(s) not judged, left out of the score (neither detected nor survived): {said}"


def run_in_scratch(
    scratch,
    report_dir,
    max_children: int,
    timeout: float,
    functions: tuple[str, ...] = (),
    algo=DEFAULT_ALGO,
    recheck: bool = False,
) -> int:
    """Prepare `scratch` for `algo`, run mutmut there and write mutmut_results.json; the exit code of `run`.

    With `functions`, mutmut tests the mutants of those functions only and the results cover only them.
    Mutants triaged (equivalent or missing-check) are skipped unless `recheck`.
    """
    log_path = report_dir / "mutmut.log"
    try:
        prepare_scratch(scratch, algo=algo)
    except RuntimeError as exc:
        print(f"error: {exc}")
        return 2
    sources = {path: (scratch / PRISTINE / path).read_text(encoding="utf-8") for path in algo.files}
    globs, problems = selection.select(functions, sources)
    if problems:
        print("error: " + "; ".join(problems))
        return 2
    covers = f"only the functions {', '.join(functions)}" if functions else "the whole of " + ", ".join(algo.files)
    print(
        f"mutmut ({algo.label}, target {algo.target}): scratch project {scratch}, {max_children} worker(s), "
        f"{covers}; log in {log_path}",
        flush=True,
    )
    skip_file = None
    if not recheck:
        entries, problems = load_triage(Path(__file__).resolve().parent / algo.triage_file)
        if problems:
            print("error: " + "; ".join(problems))
            return 2
        skip_file = write_skip_file(scratch, entries)
    links_file = write_rank_links(scratch, algo)
    exit2_dir = scratch / EXIT2_DIR
    exit2_dir.mkdir(exist_ok=True)
    code, seconds = run_mutmut(scratch, max_children, timeout, log_path, globs, skip_file, links_file, exit2_dir)
    if not all((scratch / "mutants" / (path + ".meta")).is_file() for path in algo.files):
        print(f"error: mutmut exited {code} without results:\n{tail(log_path)}")
        return 2
    # each record with its triage key: the change's column in its line, the line's occurrence in its function
    records, ambiguous = judge_exit2(list(describe(collect(scratch, functions, algo), sources)), exit2_reasons(scratch))
    if ambiguous and code == 0:
        # an exit 2 that is not the gate's refusal (an interruption, a collection error): once more, one at a time
        print(f"mutmut: rerunning {len(ambiguous)} mutant(s) that exited 2 without a configuration error, serially",
              flush=True)
        for name in ambiguous:
            (exit2_dir / (name + ".json")).unlink(missing_ok=True)
        rerun_code, rerun_seconds = run_mutmut(
            scratch, 1, timeout, report_dir / "mutmut-rerun.log", ambiguous, skip_file, links_file, exit2_dir
        )
        seconds += rerun_seconds
        code = rerun_code
        records, _ = judge_exit2(list(describe(collect(scratch, functions, algo), sources)), exit2_reasons(scratch))
    unjudged = unjudged_line(records, exit2_reasons(scratch))
    if unjudged:
        print(unjudged, flush=True)
    write_results(report_dir, scratch, records, code, seconds, max_children, functions, algo)
    checked = [r for r in records if r.status is not MutantStatus.NOT_CHECKED]
    print(
        f"mutmut: {len(records)} mutants, {len(checked)} checked in {seconds:.0f} s "
        f"({60 * len(checked) / max(seconds, 1e-9):.1f} mutants/min); exit {code}",
        flush=True,
    )
    if code != 0:
        print(f"mutmut exited {code}:\n{tail(log_path)}")
        return 2
    return 0


def run(
    max_children: int | None = None,
    timeout: float = 3600.0,
    report_dir=None,
    keep_scratch: bool = False,
    functions: tuple[str, ...] = (),
    algorithm: str = DEFAULT,
    recheck: bool = False,
) -> int:
    """Prepare the scratch project, run mutmut over `algorithm`'s trainer (`functions` only, where given).

    Mutants triaged (equivalent or missing-check) are skipped unless `recheck`. Writes mutmut_results.json; exit
    0, 1 or 2.
    """
    report_dir = Path(report_dir or ROOT / "reports")
    report_dir.mkdir(parents=True, exist_ok=True)
    max_children = max_children or max(1, os.cpu_count() or 1)
    try:
        mutmut_executable()
    except RuntimeError as exc:
        print(f"error: {exc}")
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="ppo-mutmut-"))
    try:
        return run_in_scratch(scratch, report_dir, max_children, timeout, functions, ALGORITHMS[algorithm], recheck)
    finally:
        if keep_scratch:
            print(f"scratch kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
