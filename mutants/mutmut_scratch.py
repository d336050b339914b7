"""The scratch project mutmut runs in, laid out for one algorithm, and the triage file its plugin reads.

mutmut writes its working tree to `./mutants/` where it runs, which in this project is
this package's own folder; so it runs in a copy outside the project (mutmut_run.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from . import mutmut_hooks
from .mutmut_algorithms import ALGORITHMS, DEFAULT, HOOKS_MODULE, RANK_TESTS, MutmutAlgorithm, write_scratch_config
from .project import ROOT, copy_project

DEFAULT_ALGO = ALGORITHMS[DEFAULT]
"""The default algorithm's entry: what a run that names no algorithm mutates."""
"""The algorithm a run mutates when none is named."""
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


def prepare_scratch(scratch, root=None, algo: MutmutAlgorithm = DEFAULT_ALGO):
    """Lay out the scratch project for `algo` in `scratch` (outside the project: mutmut writes ./mutants/ there).

    The mutated files are copied as they are (no line moves, so the report's lines are the project's), and a
    pristine copy of each is kept under `_pristine/`, from which `collect` places every mutant. The scratch
    `[tool.mutmut]` mutates `algo`'s files and runs the verify suite against `algo`'s target, and `algo`'s
    `unit_tests` beside it (copied to the same paths), and the two-process gate (RANK_TESTS, part of the copied
    harness) where `algo` has `rank_functions`.
    """
    root = Path(root or ROOT).resolve()
    scratch = Path(scratch).resolve()
    if scratch == root or scratch.is_relative_to(root):
        raise RuntimeError(f"refusing to run mutmut inside the project ({scratch}): it writes ./mutants/")
    copy_project(scratch, root)
    shutil.copy2(Path(mutmut_hooks.__file__), scratch / f"{HOOKS_MODULE}.py")
    for path in algo.unit_tests:  # the trainer's own tests that run beside the gate (self-contained modules)
        (scratch / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, scratch / path)
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


RANK_LINKS_FILE = "rank_links.json"


def write_rank_links(scratch, algo: MutmutAlgorithm) -> Path | None:
    """The links mutmut's statistics cannot see, as the hooks plugin reads them; None for an algorithm without
    `rank_functions`.

    The two-process test (RANK_TESTS) calls the trainer only in the ranks it starts, so the stats run records
    no function for it and mutmut would never run it against a mutant. The plugin adds these functions to it
    when the stats run ends the test: `{"tests": [path], "functions": [mutmut's names]}`.
    """
    if not algo.rank_functions:
        return None
    path = Path(scratch) / RANK_LINKS_FILE
    links = {"tests": [RANK_TESTS], "functions": list(algo.rank_links)}
    path.write_text(json.dumps(links, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


SKIP_FILE = "triaged.json"


def write_skip_file(scratch, entries) -> Path:
    """The triage's entries as the hooks plugin reads them: {function: [{line, column, occurrence, original,
    replacement, verdict}]}, keyed by what each mutant is, not by mutmut's number for it.

    Both verdicts are listed: an equivalent cannot be killed, and a missing-check survivor is killed only by a
    check the gate does not have yet; each would cost the whole suite of its function for the verdict the triage
    already gives. The plugin skips a mutant only when its function is exactly the original's with an entry's
    change made, so an entry never spares another change. After adding a check, `--recheck-triaged` runs them
    all, to find the entries the new check makes stale.
    """
    skip: dict[str, list[dict]] = {}
    for entry in entries:
        skip.setdefault(entry.function, []).append(
            {
                "line": entry.line,
                "column": entry.column,
                "occurrence": entry.occurrence,
                "original": entry.original,
                "replacement": entry.replacement,
                "verdict": entry.verdict.value,
            }
        )
    path = Path(scratch) / SKIP_FILE
    path.write_text(json.dumps(skip, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path
