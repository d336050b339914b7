"""Reading mutmut's results back: each mutant's record from its meta files and generated code, and the stats.

mutmut moves every function's body into generated functions (`x_<name>__mutmut_<n>`,
and `xǁ<Class>ǁ<method>__mutmut_<n>` inside their class); each mutant becomes a record
with its file, its location in the original file (locate.py), the replaced text, the
replacement and a unified diff, written to mutmut_results.json with the stats run's
durations and the kill costs.
"""

from __future__ import annotations

import ast
import difflib
import json
import time
from dataclasses import replace
from pathlib import Path

from .locate import locate, mutator_name
from .model import MutantRecord, MutantStatus, MutmutResults, SuiteStats
from .mutmut_algorithms import MutmutAlgorithm
from .mutmut_scratch import DEFAULT_ALGO, PRISTINE
from .scoring import kill_costs

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


def collect(scratch, functions: tuple[str, ...] = (), algo: MutmutAlgorithm = DEFAULT_ALGO) -> list[MutantRecord]:
    """One record per mutant of every file `algo` mutates; only those of `functions` where given."""
    records = [record for path in algo.files for record in collect_file(scratch, path)]
    return [r for r in records if r.function in functions] if functions else records


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
    algo: MutmutAlgorithm = DEFAULT_ALGO,
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
