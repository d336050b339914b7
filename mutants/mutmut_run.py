"""mutmut 3 over the whole of one trainer: PPO's trainer.py and config.py, or GRPO's grpo.py and grpo_config.py.

`python -m mutants mutmut [--algorithm ppo|grpo]` never runs mutmut in the project:
mutmut writes its working tree to `./mutants/`, which is this package's own folder.
Instead it

1. copies `reference_ppo/`, `harness/` and `pyproject.toml` (whose `[tool.mutmut]`
   section is the configuration) to a scratch folder outside the project, plus
   `mutmut_hooks.py` as `ppo_mutmut_hooks.py`, a pytest plugin that the
   configuration loads (see that module for what it does), and sets the scratch
   configuration to the algorithm's files and gate target (mutmut_algorithms.py);
2. keeps a pristine copy of each mutated file under `_pristine/` and refuses a
   `# pragma: no mutate` that is a region or gives no reason (`pragma_problems`):
   a line is left unmutated only where the real source says why, on that line.
   The files are not rewritten, so the report's line numbers are the project's;
3. runs `mutmut run` there (fork isolation, CPU torch, one thread per worker) with
   the verify suite against the algorithm's reference target as its tests;
4. reads mutmut's meta files (`mutants/reference_ppo/<file>.meta`) and the
   generated functions (`x_<name>__mutmut_<n>`, and `xǁ<Class>ǁ<method>__mutmut_<n>`
   inside their class) and turns each mutant into a record with its file, its
   location in the original file (locate.py), the replaced text, the replacement
   and a unified diff (mutmut_results.json).
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from . import mutmut_hooks, selection
from .locate import locate, mutator_name
from .model import MutantRecord, MutantStatus, MutmutResults, SuiteStats
from .mutmut_algorithms import ALGORITHMS, DEFAULT, HOOKS_MODULE, MutmutAlgorithm, write_scratch_config
from .mutmut_algorithms import mutmut_config as mutmut_config
from .project import ROOT, copy_project, scratch_env
from .scoring import kill_costs, load_triage

PPO = ALGORITHMS[DEFAULT]
MUTATED_FILES = PPO.files  # the default algorithm's; each algorithm's are in mutmut_algorithms.ALGORITHMS
PRISTINE = "_pristine"
PRAGMA = "# pragma: no mutate"
# a pragma's first word that mutmut reads as a region (`block`, `start`, `end`): not allowed, a reason must follow
REGION_WORDS = ("block", "start", "end")


def pragma_problems(source: str, path: str) -> list[str]:
    """Each `# pragma: no mutate` of `source` that is not on a line of code with its reason after it.

    mutmut then skips exactly that line; a region (`block`, `start`/`end`) or a bare pragma is refused, so that
    every line left unmutated says why on the line itself.
    """
    problems = []
    for number, line in enumerate(source.splitlines(), start=1):
        if "pragma: no mutate" not in line:
            continue
        code, _, comment = line.partition("#")
        reason = comment.partition("no mutate")[2].strip().lstrip(":-").strip()
        words = reason.split()
        if not code.strip():
            problems.append(f"{path}:{number}: the pragma must trail the line it spares, not stand alone")
        elif not words:
            problems.append(f"{path}:{number}: the pragma gives no reason")
        elif words[0] in REGION_WORDS:
            problems.append(f"{path}:{number}: a `no mutate {words[0]}` region; mark single lines with a reason")
    return problems


def prepare_scratch(scratch, root=None, algo: MutmutAlgorithm = PPO):
    """Lay out the scratch project for `algo` in `scratch` (outside the project: mutmut writes ./mutants/ there).

    The mutated files are copied as they are (no line moves, so the report's lines are the project's), and a
    pristine copy of each is kept under `_pristine/`, from which `collect` places every mutant. The scratch
    `[tool.mutmut]` mutates `algo`'s files and runs the verify suite against `algo`'s target.
    """
    root = Path(root or ROOT).resolve()
    scratch = Path(scratch).resolve()
    if scratch == root or scratch.is_relative_to(root):
        raise RuntimeError(f"refusing to run mutmut inside the project ({scratch}): it writes ./mutants/")
    copy_project(scratch, root)
    shutil.copy2(Path(mutmut_hooks.__file__), scratch / f"{HOOKS_MODULE}.py")
    problems = []
    for path in algo.files:
        source = (scratch / path).read_text(encoding="utf-8")
        problems += pragma_problems(source, path)
        pristine = scratch / PRISTINE / path
        pristine.parent.mkdir(parents=True, exist_ok=True)
        pristine.write_text(source, encoding="utf-8")
    problems += write_scratch_config(scratch, algo)
    if problems:
        raise RuntimeError("; ".join(problems))
    return scratch


def mutmut_executable() -> list[str]:
    """The mutmut command: the one beside this interpreter first, so that it runs with the same packages."""
    beside = Path(sys.executable).with_name("mutmut")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("mutmut")
    if found:
        return [found]
    raise RuntimeError("mutmut is not installed: pip install 'mutmut>=3.3,<4' (the `mutation` extra)")


SKIP_FILE = "triaged.json"


def write_skip_file(scratch, entries: dict) -> Path:
    """The triage's entries as the hooks plugin reads them ({name: line, original, replacement, verdict}).

    Both verdicts are listed: an equivalent cannot be killed, and a missing-check survivor is killed only by a
    check the gate does not have yet; each would cost the whole suite of its function for the verdict the triage
    already gives. The plugin skips such a mutant only when mutmut's generated code shows that very change, so an
    entry that a change to the trainer has renumbered onto another mutant does not spare it. After adding a
    check, `--recheck-triaged` runs them all, to find the entries the new check makes stale.
    """
    skip = {
        name: {
            "line": entry.line,
            "original": entry.original,
            "replacement": entry.replacement,
            "verdict": entry.verdict.value,
        }
        for name, entry in entries.items()
    }
    path = Path(scratch) / SKIP_FILE
    path.write_text(json.dumps(skip, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def run_mutmut(scratch, max_children: int, timeout: float, log_path, globs=(), skip_file=None) -> tuple[int, float]:
    """`mutmut run` in `scratch` (over the mutants matching `globs`, all where none); (exit code, seconds).

    With `skip_file`, the mutants it lists as triaged are skipped (mutmut's "skipped", exit 34).
    Output goes to `log_path`.
    """
    env = scratch_env(scratch)
    env.pop("PYTHONPATH")  # mutmut puts its own ./mutants/ first on the path
    if skip_file is not None:
        env[mutmut_hooks.SKIP_ENV] = str(skip_file)
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


CLASS_SEPARATOR = "\u01c1"  # mutmut's `ǁ` in the names of the methods it generates: xǁClassǁmethod__mutmut_3


def _functions(tree) -> dict:
    """The functions of `tree` by name: module-level ones by theirs, methods as `Class.method`.

    mutmut generates its mutants of a function next to it: module-level functions for a function,
    methods of the same class for a method.
    """
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{node.name}.{item.name}"] = item
    return found


def _lines(source_lines: list[str], node) -> list[str]:
    """The source lines of `node`, from its `def` line to its last, to compare a function with mutmut's copy of it."""
    return source_lines[node.lineno - 1 : node.end_lineno]


def _named(lines: list[str], generated: str, name: str) -> list[str]:
    """A generated function's lines with its `def` line naming the function it stands for."""
    return [lines[0].replace(f"def {generated}(", f"def {name}(", 1), *lines[1:]]


def function_of(generated_name: str) -> tuple[str, str]:
    """(the function or `Class.method` a mutant is of, the generated name of its original copy).

    `x_masked_mean__mutmut_3` -> (`masked_mean`, `x_masked_mean__mutmut_orig`);
    `xǁPPOTrainerǁrollout__mutmut_7` -> (`PPOTrainer.rollout`, `xǁPPOTrainerǁrollout__mutmut_orig`).
    """
    base = generated_name.rpartition("__mutmut_")[0]
    if base.startswith("x" + CLASS_SEPARATOR):
        cls, _, method = base[2:].partition(CLASS_SEPARATOR)
        return f"{cls}.{method}", base + "__mutmut_orig"
    return base.removeprefix("x_"), base + "__mutmut_orig"


def _generated_key(generated_name: str) -> str:
    """The key of a generated function in `_functions` of mutmut's module (methods sit in their class)."""
    base = generated_name.rpartition("__mutmut_")[0]
    if base.startswith("x" + CLASS_SEPARATOR):
        return f"{base[2:].partition(CLASS_SEPARATOR)[0]}.{generated_name}"
    return generated_name


def collect_file(scratch, path: str) -> list[MutantRecord]:
    """One record per mutant of `path` (a mutated file), read from mutmut's meta file and generated code."""
    scratch = Path(scratch)
    meta = json.loads((scratch / "mutants" / (path + ".meta")).read_text(encoding="utf-8"))
    generated_source = (scratch / "mutants" / path).read_text(encoding="utf-8")
    generated_lines = generated_source.splitlines(keepends=True)
    generated = _functions(ast.parse(generated_source))
    project_source = (scratch / PRISTINE / path).read_text(encoding="utf-8")
    project_lines = project_source.splitlines(keepends=True)
    project = _functions(ast.parse(project_source))
    durations = meta.get("durations_by_key", {})
    estimated = meta.get("estimated_durations_by_key", {})

    records = []
    for key, exit_code in meta["exit_code_by_key"].items():
        generated_name = key.rpartition(".")[2]  # x_masked_mean__mutmut_3
        function, orig_name = function_of(generated_name)
        orig_node = generated.get(_generated_key(orig_name))
        mutant_node = generated.get(_generated_key(generated_name))
        if orig_node is None or mutant_node is None or function not in project:
            raise RuntimeError(f"{key}: cannot find its generated functions or {function} in {path}")
        # from the `def` line on, with the generated name put back: a default argument is mutated there
        short = function.rpartition(".")[2]
        orig = _named(_lines(generated_lines, orig_node), orig_node.name, short)
        mutated = _named(_lines(generated_lines, mutant_node), mutant_node.name, short)
        source_node = project[function]
        here = _lines(project_lines, source_node)
        if here != orig:
            raise RuntimeError(f"{key}: mutmut's copy of {function} differs from the {path} it was made from")
        change = locate(orig, mutated, source_node.lineno)
        start = source_node.lineno - 1
        changed = project_lines[:start] + mutated + project_lines[source_node.end_lineno :]
        diff = "".join(difflib.unified_diff(project_lines, changed, f"a/{path}", f"b/{path}", n=1))
        first = change.location.start
        records.append(
            MutantRecord(
                name=key,
                function=function,
                exit_code=exit_code,
                status=MutantStatus.from_exit_code(exit_code),
                seconds=durations.get(key),
                estimated_test_seconds=estimated.get(key),
                location=change.location,
                line=project_lines[first.line - 1].strip() if first else "",
                original=change.original,
                replacement=change.replacement,
                mutator=mutator_name(change.original, change.replacement),
                diff=diff,
                file=path,
            )
        )
    return records


def collect(scratch, functions: tuple[str, ...] = (), algo: MutmutAlgorithm = PPO) -> list[MutantRecord]:
    """One record per mutant of every file `algo` mutates; only those of `functions` where given."""
    records = [record for path in algo.files for record in collect_file(scratch, path)]
    return [r for r in records if r.function in functions] if functions else records


def tail(path, lines: int = 40) -> str:
    """The last non-blank lines of a log, to say why a run failed without printing all of it."""
    text = Path(path).read_text(encoding="utf-8", errors="replace").replace("\r", "\n")
    return "\n".join(line for line in text.splitlines()[-lines:] if line.strip())


def read_stats(scratch) -> SuiteStats | None:
    """mutmut's per-test statistics from its stats run (durations, tests by function); None if missing or unreadable."""
    statsfile = scratch / "mutants" / "mutmut-stats.json"
    if not statsfile.is_file():
        return None
    try:
        data = json.loads(statsfile.read_text(encoding="utf-8"))
        return SuiteStats(
            duration_by_test=data.get("duration_by_test", {}),
            stats_time=data.get("stats_time"),
            tests_by_function={
                k.rpartition(".")[2].removeprefix("x_"): sorted(v)
                for k, v in data.get("tests_by_mangled_function_name", {}).items()
            },
        )
    except (OSError, json.JSONDecodeError):
        return None


def write_results(
    report_dir,
    scratch,
    records: list[MutantRecord],
    code: int,
    seconds: float,
    max_children: int,
    selected: tuple[str, ...] = (),
    algo: MutmutAlgorithm = PPO,
) -> None:
    """Write mutmut_results.json: the run, the source the locations refer to, every mutant, the stats, kill costs.

    The kill costs are computed here, once, while mutmut's stats file is at hand; the report reads them back.
    """
    stats = read_stats(scratch)
    costs, kill_cost = kill_costs(records, stats)
    results = MutmutResults(
        mutmut_exit_code=code,
        seconds=seconds,
        max_children=max_children,
        functions=tuple(sorted({r.function for r in records})),
        file=algo.trainer,
        source=(scratch / PRISTINE / algo.trainer).read_text(encoding="utf-8"),
        sources={path: (scratch / PRISTINE / path).read_text(encoding="utf-8") for path in algo.files},
        mutants=tuple(replace(r, cost=costs.get(r.name)) for r in records),
        tests=stats,
        kill_cost=kill_cost,
        finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        selected=tuple(selected),
        algorithm=algo.name,
    )
    (report_dir / "mutmut_results.json").write_text(json.dumps(results.to_dict(), indent=2) + "\n", encoding="utf-8")


def run_in_scratch(
    scratch,
    report_dir,
    max_children: int,
    timeout: float,
    functions: tuple[str, ...] = (),
    algo=PPO,
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
    code, seconds = run_mutmut(scratch, max_children, timeout, log_path, globs, skip_file)
    if not all((scratch / "mutants" / (path + ".meta")).is_file() for path in algo.files):
        print(f"error: mutmut exited {code} without results:\n{tail(log_path)}")
        return 2
    records = collect(scratch, functions, algo)
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
