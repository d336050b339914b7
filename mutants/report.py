"""reports/mutation.{md,json,html} from the curated run and the mutmut run, and the session's verdict.

Inputs (each optional, whatever ran): reports/curated.json (mutants.runner),
reports/mutmut_results.json (mutants.mutmut_run), mutants/equivalent.toml or
mutants/equivalent_grpo.toml (the triage of every survivor of a mutmut run over
the PPO or the GRPO trainer) and mutants/baseline.json (the score not to drop
below; GRPO's scores under its `grpo` key, apart from PPO's). The numbers come
from scoring.py, mutation.json from schema.py, mutation.html from html_page.py
and mutation.md from markdown.py; this module
writes them and fails the session on any problem: a curated mutant not killed, a
control that did not pass, an untriaged or stale-triaged survivor, a mutant
mutmut never checked, a score below the baseline, an invalid mutation.json.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from . import catalogue, html_page, keys, markdown, schema, scoring
from .model import CuratedRun, CuratedStatus, MutantStatus, MutmutResults
from .mutmut_algorithms import algorithm
from .project import ROOT

HERE = Path(__file__).resolve().parent
TRAINER = catalogue.TRAINER


def load_json(path: Path) -> dict | None:
    """The JSON file at `path`, or None when that part of the session did not run."""
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def curated_findings(curated: CuratedRun) -> tuple[list[str], list[str]]:
    """(problems, notes) of the curated run: a control that did not pass, a mutant neither killed nor skipped."""
    problems: list[str] = []
    notes: list[str] = []
    for command, control in curated.controls.items():
        if not control.passed:
            problems.append(f"curated: the control run ({command}, unmodified trainer) did not pass")
    for r in curated.mutants:
        if not r.passed:
            problems.append(f"curated: {r.id} {r.status_line}")
        elif r.status is CuratedStatus.NOT_RUN:
            notes.append(f"curated: {r.id} not run: {r.reason}")
    return problems, notes


def triage_findings(results: MutmutResults) -> tuple[MutmutResults, list[str], list[str]]:
    """The results with each survivor's triage from its algorithm's triage file, and the (problems, notes) of it."""
    triage_file = algorithm(results.algorithm).triage_file
    entries, problems = scoring.load_triage(HERE / triage_file)
    described = keys.describe(results.mutants, results.sources or {results.file: results.source})
    records, more, notes = scoring.triage(described, entries, results.selected, triage_file)
    return dataclasses.replace(results, mutants=records), problems + more, notes


SELECTIONS = "mutmut_functions"  # baseline.json's list of the scores of `--functions` runs, one per selection


def algorithm_baselines(data: dict, results: MutmutResults) -> dict:
    """The part of baseline.json that holds the scores of `results`' algorithm (PPO's at the top level).

    The dict returned is inside `data` (created there, empty, for an algorithm with none yet), so that
    recording into it records into `data`.
    """
    section = algorithm(results.algorithm).baseline_section
    return data if section is None else data.setdefault(section, {})


def selection_baseline(data: dict, selected: tuple[str, ...]) -> dict | None:
    """The baseline entry of a `--functions` run over exactly the functions `selected`, if one was recorded."""
    for entry in data.get(SELECTIONS) or []:
        if sorted(entry.get("functions") or []) == sorted(selected):
            return entry
    return None


def run_baseline(data: dict, results: MutmutResults) -> float | None:
    """The score this run must not drop below: its algorithm's whole-file one, or that of the same functions."""
    data = algorithm_baselines(json.loads(json.dumps(data)), results)  # a copy: reading adds no empty section
    entry = selection_baseline(data, results.selected) if results.selected else data.get("mutmut")
    return (entry or {}).get("score")


def record_baseline(path: Path, data: dict, results: MutmutResults, summary: scoring.Score) -> float:
    """Write this run's mutmut score to the baseline file, saying what it covers; returns the new baseline.

    A `--functions` run is recorded apart from the whole-file score, under its own list of functions;
    a GRPO run under the `grpo` key, apart from PPO's scores.
    """
    whole, data = data, algorithm_baselines(data, results)
    entry = {
        "score": summary.score,
        "total": summary.total,
        "files": list(results.sources or [results.file]),
        "recorded": time.strftime("%Y-%m-%d"),
    }
    if results.selected:
        files = sorted({r.file for r in results.mutants})
        note = f"covers only these functions' mutants ({summary.total}), not the whole of the files"
        entry = {"functions": list(results.selected), **entry, "files": files, "note": note}
        others = [e for e in data.get(SELECTIONS) or [] if e is not selection_baseline(data, results.selected)]
        data[SELECTIONS] = [*others, entry]
    else:
        data["mutmut"] = entry
    path.write_text(json.dumps(whole, indent=2) + "\n", encoding="utf-8")
    return summary.score


def mutmut_problems(
    results: MutmutResults, summary: scoring.Score, baseline: float | None, baseline_name: str
) -> list[str]:
    """What fails the session in the mutmut run: unchecked mutants, mutmut's exit code, a score below the baseline."""
    problems = []
    pending = summary.counts.get(MutantStatus.NOT_CHECKED.text, 0)
    if pending:
        problems.append(f"mutmut: {pending} mutant(s) were never checked")
    if results.mutmut_exit_code not in (0, None):
        problems.append(f"mutmut exited {results.mutmut_exit_code}")
    if baseline is None:
        # a selection of functions with no recorded score of its own is only noted (write_reports)
        if not results.selected:
            problems.append(f"{baseline_name} has no mutmut score to hold the line")
    elif summary.score is None or summary.score < baseline - 1e-9:
        problems.append(f"mutmut score {summary.score} % is below the baseline {baseline:.2f} %")
    return problems


def print_outcome(
    report_dir: Path, summary: scoring.Score | None, baseline: float | None, js: str | None, problems: list[str]
) -> None:
    """The terminal summary: the mutmut score, the files written, and each problem on stderr."""
    if summary is not None:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(summary.counts.items()))
        print(f"mutmut score {summary.score} % (baseline {baseline}); {summary.total} mutants: {counts}")
    component = "" if js else " (WITHOUT the web component)"
    print(f"wrote {report_dir / 'mutation.md'}, mutation.json, mutation.html{component}")
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)


def trainer_source(results: MutmutResults | None) -> str:
    """The PPO trainer as the mutmut run copied it; "" where that run did not mutate it (a GRPO run, or none)."""
    if results is None:
        return ""
    return results.sources.get(TRAINER) or (results.source if results.file == TRAINER else "")


def reported_algorithms(curated: CuratedRun | None, results: MutmutResults | None) -> list[str]:
    """The algorithms whose trainers the report's runs mutated, upper-cased, in a fixed order (for its title)."""
    names = {m.mutant.algorithm for m in curated.mutants} if curated is not None else set()
    names |= {results.algorithm} if results is not None else set()
    return [name.upper() for name in sorted(names)]


def write_reports(
    report_dir: Path = ROOT / "reports", install_elements: bool = True, update_baseline: bool = False
) -> int:
    """Write mutation.md/.json/.html from whatever ran; exit 1 when a problem fails the session."""
    report_dir.mkdir(parents=True, exist_ok=True)
    curated_data = load_json(report_dir / "curated.json")
    results_data = load_json(report_dir / "mutmut_results.json")
    if curated_data is None and results_data is None:
        print(f"error: nothing to report in {report_dir}: run `python -m mutants curated` or `mutmut` first")
        return 2
    curated = None if curated_data is None else CuratedRun.from_dict(curated_data)
    results = None if results_data is None else MutmutResults.from_dict(results_data)
    baseline_path = HERE / "baseline.json"
    baseline_data = load_json(baseline_path) or {}
    baseline = run_baseline(baseline_data, results) if results is not None else None
    # the PPO trainer's source, which PPO's mutmut and curated locations refer to: as copied for the mutmut run
    source = trainer_source(results) or (ROOT / TRAINER).read_text(encoding="utf-8")
    problems, notes = curated_findings(curated) if curated is not None else ([], [])

    summary, timing = None, None
    if results is not None:
        results, more, triage_notes = triage_findings(results)
        problems += more
        notes += triage_notes
        summary = scoring.score(results.mutants)
        timing = scoring.timing(results)
        if summary.unjudged:
            # never counted as detected or survived, never dropped silently: the driver reran them once, serially
            line = (
                f"mutmut: {summary.unjudged} mutant(s) not judged (interrupted, suspicious or segfault, after one "
                "serial rerun of those that exited 2): left out of the score, neither detected nor survived"
            )
            notes.append(line)
            print(line)
        if update_baseline and summary.score is not None:
            baseline = record_baseline(baseline_path, baseline_data, results, summary)
            notes.append(f"baseline updated to {baseline:.2f} %")
        problems += mutmut_problems(results, summary, baseline, baseline_path.name)
        if results.selected:
            covered = ", ".join(results.selected)
            notes.insert(0, f"this mutmut run covers ONLY the functions {covered}, not the whole files")
            if baseline is None:
                notes.append(f"{baseline_path.name} has no score for this selection of functions: not compared")

    report, unplaced = schema.schema_report(curated, results, source, baseline)
    if unplaced:
        notes.append(
            f"curated mutant(s) {', '.join(unplaced)} are left out of mutation.json: their patch does not match "
            "the trainer source of the mutmut run (rerun both)"
        )
    problems += [f"mutation.json: {p}" for p in schema.validate(report)]
    (report_dir / "mutation.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    js, origin = html_page.find_elements(install_elements)
    title = f"{' and '.join(reported_algorithms(curated, results))} statistics gate: mutation testing"
    (report_dir / "mutation.html").write_text(html_page.render(report, js, title), encoding="utf-8")
    md = markdown.render(title, problems, notes, curated, results, summary, timing, baseline, js, origin)
    (report_dir / "mutation.md").write_text(md, encoding="utf-8")
    print_outcome(report_dir, summary, baseline, js, problems)
    return 1 if problems else 0
