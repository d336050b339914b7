"""reports/mutation.json: the report as mutation-testing-report-schema, version 2, and its validation.

Built as plain dicts and written with the json module. Each mutated file has its own
file entry: mutmut's mutants of the PPO trainer and the curated PPO mutants share
reference_trainers/ppo.py's, the curated GRPO mutants and mutmut's mutants of the GRPO
trainer (a run with `--algorithm grpo`) share reference_trainers/grpo.py's, and a curated
mutant of what both trainers share is placed in common.py's, beside mutmut's mutants of it;
the configurations have their own. The curated GRPO mutants' checks are named
`grpo:<check id>` (GRPO reuses some PPO scenario names). A survivor triaged "equivalent"
is reported as Ignored with its reason.
"""

from __future__ import annotations

from importlib import metadata

from . import catalogue
from .model import CuratedResult, CuratedRun, Location, MutantRecord, MutmutResults, Position, SchemaStatus
from .project import ROOT

TRAINER = catalogue.TRAINER

TEST_FILE = "harness/suite/test_verify.py"
THRESHOLDS = {"high": 90, "low": 75}


def test_id(algorithm: str, check: str) -> str:
    """The id of a check in the report's tests: the check id for the default algorithm (PPO), `<algorithm>:<check
    id>` for another (`grpo:<check id>`: GRPO reuses some PPO scenario names)."""
    from harness.algorithms import DEFAULT_ALGORITHM

    return check if algorithm == DEFAULT_ALGORITHM else f"{algorithm}:{check}"


def curated_location(mutant: catalogue.Mutant, source: str, file: str = TRAINER) -> tuple[Location, str] | None:
    """Location in `source` (the text of `file`) of the lines the mutant's first hunk there changes, and their
    new text; a hunk that only inserts lines is placed on the line before them."""
    for rep in mutant.patch:
        if rep.file != file:
            continue
        offset = source.find(rep.hunk_old)
        if offset < 0 or source.count(rep.hunk_old) != 1:
            return None
        start, old, new = offset + len(rep.before), rep.old, rep.new
        if not old and rep.before:
            line = rep.before.splitlines(keepends=True)[-1]
            start, old, new = start - len(line), line, line + new
        old = old.rstrip("\n")
        return Location(Position.at(source, start), Position.at(source, start + len(old))), new.rstrip("\n")
    return None


def mutmut_entry(r: MutantRecord) -> dict:
    """The schema-v2 entry of one mutmut mutant; a survivor triaged equivalent is Ignored, with its reason."""
    entry = {
        "id": r.short,
        "mutatorName": r.mutator,
        "replacement": r.replacement,
        "location": r.location.to_dict(),
        "status": (SchemaStatus.IGNORED if r.equivalent else r.status.schema).value,
        "description": f"mutmut, in {r.function}: {r.original} -> {r.replacement}",
    }
    if r.why:
        entry["statusReason"] = f"{r.verdict.value}: {r.why}"
    if r.seconds is not None:
        entry["duration"] = round(1000 * r.seconds)
    return entry


def curated_entry(r: CuratedResult, source: str, file: str = TRAINER) -> dict | None:
    """The schema-v2 entry of one curated mutant, or None when its patch cannot be placed in `source`."""
    where = curated_location(r.mutant, source, file)
    if where is None:
        return None
    location, replacement = where
    m = r.mutant
    entry = {
        "id": m.id,
        "mutatorName": f"Curated bug class {m.bug_class}",
        "replacement": replacement,
        "location": location.to_dict(),
        "status": r.status.schema.value,
        "description": f"{m.title} (source: {m.source}; must be killed by {', '.join(m.killed_by)})",
        "statusReason": r.status_line,
    }
    checks = catalogue.ALGORITHM_CHECKS.get(m.algorithm, {})
    killers = [test_id(m.algorithm, c) for c in r.failed_checks if c in checks]
    if killers:
        entry["killedBy"] = killers
    if r.seconds:
        entry["duration"] = round(1000 * r.seconds)
    return entry


def trainers() -> dict[str, str]:
    """Each algorithm's trainer file (the first of its mutated files): its curated mutants are placed there."""
    from .mutmut_algorithms import ALGORITHMS

    return {name: algorithm.trainer for name, algorithm in ALGORITHMS.items()}


def curated_file(mutant: catalogue.Mutant, paths: dict[str, str]) -> str:
    """The file a curated mutant is placed in: its algorithm's trainer (`paths`) where its patch changes it, else the
    first file it patches (common.py, for a bug in what the two trainers share)."""
    patched = [rep.file for rep in mutant.patch]
    trainer = paths.get(mutant.algorithm, TRAINER)
    return trainer if trainer in patched or not patched else patched[0]


def schema_report(
    curated: CuratedRun | None, results: MutmutResults | None, source: str, baseline: float | None
) -> tuple[dict, list[str]]:
    """The report as mutation-testing-report-schema v2 (plain dicts), and the curated ids it could not place."""
    records = results.mutants if results is not None else ()
    paths = trainers()
    mutated = list(results.sources) if results is not None else []

    def text_of(path: str) -> str:
        """A file as a mutmut run over it copied it, else as it is now (its curated mutants' source)."""
        if path == TRAINER:
            return source
        copied = results.sources.get(path) if results is not None else None
        return copied or (ROOT / path).read_text(encoding="utf-8")

    entries: dict[str, list[dict]] = {path: [] for path in (TRAINER, *paths.values())}
    for r in records:
        entries.setdefault(r.file, []).append(mutmut_entry(r))
    unplaced: list[str] = []
    for r in curated.mutants if curated is not None else ():
        path = curated_file(r.mutant, paths)
        entry = curated_entry(r, text_of(path), path)
        if entry is None:
            unplaced.append(r.id)
        else:
            entries.setdefault(path, []).append(entry)
    tests = [
        {"id": test_id(algorithm, cid), "name": f"{TEST_FILE}::{node}"}
        for algorithm, checks in catalogue.ALGORITHM_CHECKS.items()
        for cid, (_, node) in checks.items()
    ]
    thresholds = dict(THRESHOLDS)
    if baseline is not None:
        thresholds["break"] = int(baseline)
    # the PPO trainer always; every file mutmut mutated; any other file a curated mutant is placed in
    others = [p for p in dict.fromkeys([*mutated, *entries]) if p != TRAINER and (p in mutated or entries[p])]
    files = {p: {"language": "python", "source": text_of(p), "mutants": entries.get(p, [])} for p in [TRAINER, *others]}
    report = {
        "schemaVersion": "2",
        "thresholds": thresholds,
        "projectRoot": str(ROOT),
        "files": files,
        "testFiles": {TEST_FILE: {"tests": tests}},
        "framework": {"name": "mutmut + curated catalogue", "version": mutmut_version() or "n/a"},
    }
    return report, unplaced


def mutmut_version() -> str | None:
    """The installed mutmut's version, for the report's `framework` entry; None where it is not installed."""
    try:
        return metadata.version("mutmut")
    except metadata.PackageNotFoundError:
        return None


REQUIRED_MUTANT_KEYS = ("id", "mutatorName", "location", "status")
SCHEMA_STATUSES = frozenset(s.value for s in SchemaStatus)


def validate(report: dict) -> list[str]:
    """Structural problems of a schema-v2 report (required keys, types, statuses, positions)."""
    problems = []
    for key in ("schemaVersion", "thresholds", "files"):
        if key not in report:
            problems.append(f"missing {key}")
    if str(report.get("schemaVersion", "")).split(".")[0] != "2":
        problems.append("schemaVersion is not 2")
    th = report.get("thresholds", {})
    if not all(isinstance(th.get(k), int) and 0 <= th[k] <= 100 for k in ("high", "low")):
        problems.append("thresholds need integer high and low in 0..100")
    for path, entry in report.get("files", {}).items():
        for key in ("language", "source", "mutants"):
            if key not in entry:
                problems.append(f"{path}: missing {key}")
        lines = entry.get("source", "").split("\n")
        ids = set()
        for m in entry.get("mutants", []):
            missing = [k for k in REQUIRED_MUTANT_KEYS if k not in m]
            if missing:
                problems.append(f"{path}: mutant {m.get('id', '?')} lacks {missing}")
                continue
            if m["id"] in ids:
                problems.append(f"{path}: duplicate mutant id {m['id']}")
            ids.add(m["id"])
            if m["status"] not in SCHEMA_STATUSES:
                problems.append(f"{path}: mutant {m['id']}: status {m['status']!r}")
            for end in ("start", "end"):
                pos = m["location"].get(end) or {}
                if not (isinstance(pos.get("line"), int) and isinstance(pos.get("column"), int)):
                    problems.append(f"{path}: mutant {m['id']}: location.{end} needs integer line and column")
                elif not (1 <= pos["line"] <= len(lines) and pos["column"] >= 1):
                    problems.append(f"{path}: mutant {m['id']}: location.{end} {pos} is outside the source")
    return problems
