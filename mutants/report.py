"""reports/mutation.{md,json,html} from the curated run and the mutmut run.

Inputs (each optional, whatever ran): reports/curated.json (mutants.runner),
reports/mutmut_results.json (mutants.mutmut_run), mutants/equivalent.toml (the
triage of every mutmut survivor) and mutants/baseline.json (the score not to
drop below).

- mutation.json follows the mutation-testing-report-schema, version 2, built as
  plain dicts and written with the json module. mutmut's mutants and the curated
  mutants share the one file entry of reference_ppo/trainer.py; a survivor triaged
  "equivalent" is reported as Ignored with its reason.
- mutation.html renders that JSON with the `mutation-test-report-app` web
  component of the npm package `mutation-testing-elements`, taken at report time
  from a cache outside the repository (installed there with npm when missing) and
  inlined, so the page opens offline. Without it the page is a plain table, and
  mutation.md says so.
- mutation.md: the score and counts, the curated table, each survivor with its
  diff and triage, timings, and every problem that fails the session.

Score: (killed + timeout) / (killed + timeout + survived + no tests), survivors
triaged "equivalent" left out of both. "missing-check" survivors count as
survived: they are known gaps of the gate, listed so that someone closes them.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import catalogue, mutmut_run

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
TRAINER = catalogue.TRAINER
TEST_FILE = "harness/suite/test_verify.py"
ELEMENTS_PACKAGE = "mutation-testing-elements"
ELEMENTS_VERSION = "3"
ELEMENTS_JS = Path("node_modules") / ELEMENTS_PACKAGE / "dist" / "mutation-test-elements.js"
THRESHOLDS = {"high": 90, "low": 75}

SCHEMA_STATUS = {
    "killed": "Killed",
    "timeout": "Timeout",
    "survived": "Survived",
    "no tests": "NoCoverage",
    "skipped": "Ignored",
    "caught by type check": "CompileError",
    "suspicious": "RuntimeError",
    "segfault": "RuntimeError",
    "interrupted": "RuntimeError",
    "check was interrupted by user": "RuntimeError",
    "not checked": "Pending",
}
CURATED_STATUS = {
    "killed": "Killed",
    "killed by unnamed checks": "Killed",
    "survived": "Survived",
    "error": "RuntimeError",
    "not run": "Ignored",
}
VERDICTS = ("equivalent", "missing-check")


# ---------------------------------------------------------------- inputs


def load_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def load_toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    if not path.is_file():
        return {}
    return tomllib.loads(path.read_text(encoding="utf-8"))


def load_triage(path: Path = HERE / "equivalent.toml") -> tuple[dict[str, dict], list[str]]:
    """{mutant name: entry} of the triage file, and the problems with its entries."""
    entries: dict[str, dict] = {}
    problems: list[str] = []
    for i, entry in enumerate(load_toml(path).get("mutant", [])):
        name = entry.get("name", "")
        missing = [k for k in ("name", "line", "original", "replacement", "verdict", "why") if k not in entry]
        if missing:
            problems.append(f"{path.name} entry {i + 1} ({name or '?'}): missing {', '.join(missing)}")
            continue
        if entry["verdict"] not in VERDICTS:
            problems.append(f"{path.name}: {name}: verdict must be one of {VERDICTS}, not {entry['verdict']!r}")
            continue
        if not entry["why"].strip():
            problems.append(f"{path.name}: {name}: empty why")
        if name in entries:
            problems.append(f"{path.name}: {name} is triaged twice")
        entries[name] = entry
    return entries, problems


# ---------------------------------------------------------------- mutmut: triage and score


def short(name: str) -> str:
    return name.rpartition(".")[2]


def triage(records: list[dict], entries: dict[str, dict]) -> tuple[list[str], list[str]]:
    """Mark each record's `verdict` / `why` from the triage file; returns (problems, notes)."""
    problems, notes = [], []
    for r in records:
        entry = entries.get(r["name"])
        undetected = r["status"] in ("survived", "no tests")
        if entry is None:
            if undetected:
                problems.append(
                    f"untriaged survivor {short(r['name'])} ({r['function']}, line {r['location']['start']['line']}): "
                    f"{r['original']!r} -> {r['replacement']!r}; add it to mutants/equivalent.toml or add a check"
                )
            continue
        if (entry["line"], entry["original"], entry["replacement"]) != (r.get("line"), r["original"], r["replacement"]):
            problems.append(
                f"stale triage of {short(r['name'])}: the file says {entry['original']!r} -> {entry['replacement']!r} "
                f"in `{entry['line']}`, mutmut made {r['original']!r} -> {r['replacement']!r} in `{r.get('line')}` "
                "(renumbered after a change to the code? re-triage it)"
            )
            continue
        if undetected:
            r["verdict"], r["why"] = entry["verdict"], entry["why"]
        else:
            notes.append(f"{short(r['name'])} is triaged {entry['verdict']} but is now {r['status']}: drop its entry")
    known = {r["name"] for r in records}
    for name in entries:
        if name not in known:
            notes.append(f"triage entry {short(name)} names no current mutant: drop it")
    return problems, notes


def score(records: list[dict]) -> dict:
    """Counts and the mutation score (percent) of the mutmut records (after `triage`)."""
    counts: dict[str, int] = {}
    for r in records:
        key = "equivalent" if r.get("verdict") == "equivalent" else r["status"]
        counts[key] = counts.get(key, 0) + 1
    detected = counts.get("killed", 0) + counts.get("timeout", 0)
    undetected = counts.get("survived", 0) + counts.get("no tests", 0)
    valid = detected + undetected
    return {
        "total": len(records),
        "counts": counts,
        "detected": detected,
        "undetected": undetected,
        "missing_check": sum(1 for r in records if r.get("verdict") == "missing-check"),
        "score": round(100.0 * detected / valid, 2) if valid else None,
    }


def timing(results: dict) -> dict:
    """Throughput, the mean cost per mutant, and each killed mutant's cost against the test that killed it."""
    records = results["mutants"]
    checked = [r for r in records if r.get("seconds") is not None]
    stats = results.get("tests") or {}
    tests = stats.get("duration_by_test") or {}
    per_kill = [r["seconds"] for r in checked if r["status"] == "killed"]
    per_survivor = [r["seconds"] for r in checked if r["status"] == "survived"]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return {
        "seconds": results.get("seconds"),
        "mutants_per_minute": 60.0 * len(checked) / results["seconds"] if results.get("seconds") else None,
        "mean_seconds_killed": mean(per_kill),
        "mean_seconds_survived": mean(per_survivor),
        "suite_seconds": sum(tests.values()) if tests else None,
        "kill_cost": mutmut_run.kill_costs(records, stats)[1],
        "workers": results.get("max_children"),
    }


# ---------------------------------------------------------------- mutation-testing-report-schema v2


def position(text: str, offset: int) -> dict:
    before = text[:offset]
    return {"line": before.count("\n") + 1, "column": offset - (before.rfind("\n") + 1) + 1}


def curated_location(mutant: catalogue.Mutant, source: str) -> tuple[dict, str] | None:
    """Location in `source` of the mutant's first replacement in trainer.py, and its new text."""
    for rep in mutant.patch:
        if rep.file != TRAINER:
            continue
        offset = source.find(rep.old)
        if offset < 0 or source.count(rep.old) != 1:
            return None
        old = rep.old.rstrip("\n")
        return {"start": position(source, offset), "end": position(source, offset + len(old))}, rep.new.rstrip("\n")
    return None


def schema_report(
    curated: dict | None, results: dict | None, source: str, baseline: float | None
) -> tuple[dict, list[str]]:
    """The report as mutation-testing-report-schema v2 (plain dicts), and the curated ids it could not place."""
    mutants: list[dict] = []
    unplaced: list[str] = []
    tests = [{"id": cid, "name": f"{TEST_FILE}::{node}"} for cid, (_, node) in catalogue.CHECKS.items()]
    for r in (results or {}).get("mutants", []):
        entry = {
            "id": short(r["name"]),
            "mutatorName": r["mutator"],
            "replacement": r["replacement"],
            "location": r["location"],
            "status": "Ignored" if r.get("verdict") == "equivalent" else SCHEMA_STATUS.get(r["status"], "RuntimeError"),
            "description": f"mutmut, in {r['function']}: {r['original']} -> {r['replacement']}",
        }
        if r.get("why"):
            entry["statusReason"] = f"{r['verdict']}: {r['why']}"
        if r.get("seconds") is not None:
            entry["duration"] = round(1000 * r["seconds"])
        mutants.append(entry)
    by_id = {m.id: m for m in catalogue.MUTANTS}
    for r in (curated or {}).get("mutants", []):
        mutant = by_id.get(r["id"])
        where = curated_location(mutant, source) if mutant else None
        if where is None:
            unplaced.append(r["id"])
            continue
        location, replacement = where
        entry = {
            "id": r["id"],
            "mutatorName": f"Curated bug class {r['bug_class']}",
            "replacement": replacement,
            "location": location,
            "status": CURATED_STATUS.get(r["status"], "RuntimeError"),
            "description": f"{r['title']} (source: {r['source']}; must be killed by {', '.join(r['killed_by'])})",
            "statusReason": r["status"] + (f": {r['reason'].splitlines()[0]}" if r.get("reason") else ""),
        }
        killers = [c for c in r.get("failed_checks", []) if c in catalogue.CHECKS]
        if killers:
            entry["killedBy"] = killers
        if r.get("seconds"):
            entry["duration"] = round(1000 * r["seconds"])
        mutants.append(entry)
    thresholds = dict(THRESHOLDS)
    if baseline is not None:
        thresholds["break"] = int(baseline)
    report = {
        "schemaVersion": "2",
        "thresholds": thresholds,
        "projectRoot": str(ROOT),
        "files": {TRAINER: {"language": "python", "source": source, "mutants": mutants}},
        "testFiles": {TEST_FILE: {"tests": tests}},
        "framework": {"name": "mutmut + curated catalogue", "version": mutmut_version() or "n/a"},
    }
    return report, unplaced


def mutmut_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("mutmut")
    except metadata.PackageNotFoundError:
        return None


REQUIRED_MUTANT_KEYS = ("id", "mutatorName", "location", "status")
SCHEMA_STATUSES = ("Killed", "Survived", "NoCoverage", "CompileError", "RuntimeError", "Timeout", "Ignored", "Pending")


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


# ---------------------------------------------------------------- HTML


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ppo-stats-harness" / ELEMENTS_PACKAGE


def find_elements(install: bool = True) -> tuple[str | None, str]:
    """(the component's JavaScript, where it came from or why it is missing)."""
    explicit = os.environ.get("MUTATION_TESTING_ELEMENTS_JS")
    if explicit:
        path = Path(explicit)
        if path.is_file():
            return path.read_text(encoding="utf-8"), f"{path} (MUTATION_TESTING_ELEMENTS_JS)"
        return None, f"MUTATION_TESTING_ELEMENTS_JS={explicit} does not exist"
    cache = cache_dir()
    js = cache / ELEMENTS_JS
    if not js.is_file() and install:
        npm = shutil.which("npm")
        if npm is None:
            return None, "npm is not installed, and no cached copy of mutation-testing-elements was found"
        cache.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--prefix",
                    str(cache),
                    f"{ELEMENTS_PACKAGE}@{ELEMENTS_VERSION}",
                ],
                capture_output=True,
                text=True,
                timeout=300,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return None, "npm install mutation-testing-elements timed out"
        if proc.returncode != 0:
            return None, f"npm install mutation-testing-elements failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
    if not js.is_file():
        return None, f"{js} is missing"
    version = ""
    meta = cache / "node_modules" / ELEMENTS_PACKAGE / "package.json"
    if meta.is_file():
        version = json.loads(meta.read_text(encoding="utf-8")).get("version", "")
    return js.read_text(encoding="utf-8"), f"npm {ELEMENTS_PACKAGE} {version} (cached in {cache})"


def script_safe(text: str) -> str:
    """Text that cannot close the <script> element it is inlined in."""
    return text.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def render_html(report: dict, js: str | None, title: str) -> str:
    data = json.dumps(report).replace("<", "\\u003c")
    if js is not None:
        return (
            '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(title)}</title>\n"
            f"<script>\n{script_safe(js)}\n</script>\n</head>\n<body>\n"
            f'<mutation-test-report-app title-postfix="{html.escape(title)}"></mutation-test-report-app>\n'
            f'<script type="application/json" id="mutation-report">{data}</script>\n'
            "<script>\n"
            "document.querySelector('mutation-test-report-app').report =\n"
            "  JSON.parse(document.getElementById('mutation-report').textContent);\n"
            "</script>\n</body>\n</html>\n"
        )
    rows = []
    for path, entry in report["files"].items():
        for m in entry["mutants"]:
            start = m["location"]["start"]
            rows.append(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(x))}</td>"
                    for x in (
                        m["id"],
                        m["status"],
                        f"{path}:{start['line']}:{start['column']}",
                        m["mutatorName"],
                        m.get("replacement", ""),
                        m.get("statusReason", ""),
                    )
                )
                + "</tr>"
            )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        "<p><strong>The mutation-testing-elements web component was not available when this page was written; "
        "this is a plain table of the same report (see mutation.md).</strong></p>\n"
        "<table>\n<tr><th>id</th><th>status</th><th>location</th><th>mutator</th><th>replacement</th><th>reason</th></tr>\n"
        + "\n".join(rows)
        + f'\n</table>\n<script type="application/json" id="mutation-report">{data}</script>\n</body>\n</html>\n'
    )


# ---------------------------------------------------------------- Markdown


def md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def curated_section(curated: dict) -> list[str]:
    out = ["## Curated known-bug mutants", ""]
    control = curated.get("control", {})
    mode = (
        "full suite for every mutant"
        if curated.get("full")
        else "each mutant's named checks (-k), plus the full suite once on the unmodified copy"
    )
    out.append(
        f"{len(curated['mutants'])} mutant(s) in {curated.get('wall_seconds', 0):.0f} s wall with "
        f"{curated.get('jobs')} job(s); selection: {mode}. Control runs on the unmodified copy: "
        + "; ".join(
            f"{'full suite' if command == 'verify' else command} **{'pass' if c.get('passed') else 'FAIL'}** "
            f"({c.get('checks', 0)} checks, {c.get('seconds', 0):.1f} s)"
            for command, c in (curated.get("controls") or {"verify": control}).items()
        )
        + "."
    )
    out += [
        "",
        "| mutant | bug class | source | must be killed by | killed by | status | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in curated["mutants"]:
        other = sorted(set(r.get("failed_checks", [])) - set(r.get("named_failed", [])))
        killed = ", ".join(r.get("named_failed", [])) or "-"
        if other:
            killed += f" (also: {', '.join(other)})"
        out.append(
            f"| `{r['id']}` | {r['bug_class']} | {md_cell(r['source'])} | {md_cell(', '.join(r['killed_by']))} "
            f"| {md_cell(killed)} | {r['status']} | {r.get('seconds', 0):.1f} |"
        )
    for item in curated.get("not_applicable", []):
        out.append(f"\nBug class {item['bug_class']} cannot arise in the reference trainer: {item['reason']}")
    details = [r for r in curated["mutants"] if r["status"] != "killed"]
    for r in details:
        out += ["", f"### `{r['id']}`: {r['status']}", "", md_cell(r["title"]), "", fence(r.get("reason", ""), "text")]
        if r.get("diff"):
            out += ["", fence(r["diff"], "diff")]
    out += ["", "<details><summary>The curated patches</summary>", ""]
    for r in curated["mutants"]:
        out += [
            f"**`{r['id']}`** (class {r['bug_class']}): {md_cell(r['title'])}",
            "",
            fence(r.get("diff", ""), "diff"),
            "",
        ]
    out += ["</details>", ""]
    return out


def mutmut_section(results: dict, summary: dict, timings: dict, baseline: float | None) -> list[str]:
    """The mutmut section of mutation.md: the score, timings, the per-function table and every survivor."""
    out = mutmut_summary(results, summary, baseline)
    if timings.get("seconds"):
        out += [timing_text(timings), ""]
    return out + per_function_table(results) + survivors_section(results)


def mutmut_summary(results: dict, summary: dict, baseline: float | None) -> list[str]:
    """The section's heading, the functions and tests mutmut ran over, and the score against the baseline."""
    c = summary["counts"]
    out = ["## mutmut over the statistics code", ""]
    out.append(
        f"Functions: {', '.join(f'`{f}`' for f in results['functions'])} of `{results['file']}`; "
        f"tests: the verify suite (`{TEST_FILE}`)."
    )
    score_text = f"{summary['score']:.2f} %" if summary["score"] is not None else "n/a"
    base_text = f"{baseline:.2f} %" if baseline is not None else "none"
    out += [
        "",
        f"**Mutation score: {score_text}** (baseline {base_text}) — {summary['total']} mutants: "
        f"{c.get('killed', 0)} killed, {c.get('survived', 0)} survived "
        f"({summary['missing_check']} triaged missing-check), {c.get('timeout', 0)} timeout, "
        f"{c.get('equivalent', 0)} equivalent (ignored), {c.get('no tests', 0)} without tests"
        + "".join(
            f", {n} {k}"
            for k, n in sorted(c.items())
            if k not in ("killed", "survived", "timeout", "equivalent", "no tests")
        )
        + ".",
        "",
    ]
    return out


def timing_text(timings: dict) -> str:
    """The timing paragraph: the whole run, the cost per mutant and the cost against the killing test."""
    return (
        f"Timing: {timings['seconds']:.0f} s for the mutmut run ({timings['workers']} worker(s), "
        f"{timings['mutants_per_minute']:.1f} mutants/min, stats and clean run included). "
        + (
            f"Per mutant: {timings['mean_seconds_killed']:.3f} s on average when killed"
            if timings["mean_seconds_killed"]
            else ""
        )
        + (
            f", {timings['mean_seconds_survived']:.2f} s when it survives (the whole suite)"
            if timings["mean_seconds_survived"]
            else ""
        )
        + (f"; the suite's tests take {timings['suite_seconds']:.1f} s in all. " if timings["suite_seconds"] else ". ")
        + cost_text(timings.get("kill_cost") or {})
    )


def cost_text(cost: dict) -> str:
    """Each killed mutant's wall time over the time of the test that killed it, against the issue's goal."""
    goal = cost.get("goal_ratio", mutmut_run.COST_GOAL)
    text = (
        f"Goal (from the issue): a killed mutant costs under {goal:g}x the killing test's own time (no re-import "
        "of torch per mutant). Measured per killed mutant: the wall time mutmut records for it (`durations_by_key` "
        "in its meta file: fork of the worker to its exit, one `pytest -x` session) over the killing test's "
        "duration in mutmut's stats run (`duration_by_test` in mutmut-stats.json: the test's call phase, "
        "from a cold observation cache). mutmut does not record which test killed a mutant: it runs the "
        "tests linked to the mutated function fastest first and stops at the first failure, so the first test it "
        "runs is taken as the killer; where a later, slower test killed it, the ratio is overstated."
    )
    if not cost.get("measured"):
        return text + " No killed mutant could be measured (no test durations)."
    tests = ", ".join(f"`{t.rpartition('::')[2]}` ({n})" for t, n in cost["first_tests"].items())
    verdict = "met" if cost["goal_met"] else "NOT met"
    return text + (
        f" Over {cost['measured']} of {cost['killed']} killed mutants: ratio median "
        f"**{cost['median_ratio']:.2f}x**, 90th percentile **{cost['p90_ratio']:.2f}x**, "
        f"{100 * cost['share_under_goal']:.0f} % under {goal:g}x; medians: {cost['median_seconds']:.3f} s "
        f"per killed mutant, {cost['median_first_test_seconds']:.3f} s for its first test (first test: {tests}). "
        f"**Goal {verdict}** (met when the 90th percentile is under {goal:g}x)."
    )


def per_function_table(results: dict) -> list[str]:
    """The mutants of each function by outcome, and how many tests mutmut links to each function."""
    per_function: dict[str, dict[str, int]] = {}
    for r in results["mutants"]:
        key = "equivalent" if r.get("verdict") == "equivalent" else r["status"]
        per_function.setdefault(r["function"], {})
        per_function[r["function"]][key] = per_function[r["function"]].get(key, 0) + 1
    out = ["| function | mutants | killed | survived | equivalent | other |", "|---|---|---|---|---|---|"]
    for fn, counts in per_function.items():
        other = sum(n for k, n in counts.items() if k not in ("killed", "survived", "equivalent"))
        out.append(
            f"| `{fn}` | {sum(counts.values())} | {counts.get('killed', 0)} | {counts.get('survived', 0)} "
            f"| {counts.get('equivalent', 0)} | {other} |"
        )
    tests_by_function = (results.get("tests") or {}).get("tests_by_function") or {}
    if tests_by_function:
        out += [
            "",
            "Tests mutmut links to each function (from its stats run): "
            + ", ".join(f"`{fn}` {len(t)}" for fn, t in sorted(tests_by_function.items()))
            + ".",
        ]
    return out


def survivors_section(results: dict) -> list[str]:
    """Each surviving (or untested) mutant with its location, replacement, triage and diff."""
    survivors = [r for r in results["mutants"] if r["status"] in ("survived", "no tests")]
    verdicts = {}
    for r in survivors:
        verdicts[r.get("verdict", "untriaged")] = verdicts.get(r.get("verdict", "untriaged"), 0) + 1
    out = [
        "",
        f"### Survivors ({len(survivors)}: " + ", ".join(f"{n} {k}" for k, n in sorted(verdicts.items())) + ")",
        "",
    ]
    if not survivors:
        out.append("None.")
    for r in survivors:
        loc = r["location"]["start"]
        verdict = r.get("verdict", "UNTRIAGED")
        out += [
            f"#### `{short(r['name'])}` — {verdict}",
            "",
            f"`{r['function']}`, line {loc['line']}: `{md_cell(r['original'])}` → "
            f"`{md_cell(r['replacement'])}` ({r['mutator']}).",
            "",
            (r.get("why") or "Not triaged: add it to mutants/equivalent.toml (equivalent, with why) or add a check."),
            "",
            fence(r["diff"], "diff"),
            "",
        ]
    return out


def header_section(
    title: str, failed: bool, curated: dict | None, results: dict | None, js: str | None, origin: str
) -> list[str]:
    """The top of mutation.md: the verdict, the inputs it was made from, and how mutation.html was rendered."""
    md = [f"# {title}", ""]
    md.append(
        f"Verdict: **{'FAIL' if failed else 'pass'}**. Generated {time.strftime('%Y-%m-%d %H:%M:%S')} from "
        + "; ".join(
            f"{name} (finished {data.get('finished', '?')})"
            for name, data in (("curated.json", curated), ("mutmut_results.json", results))
            if data
        )
        + "."
    )
    md.append("")
    if js is None:
        md.append(
            f"**mutation.html was written WITHOUT the mutation-testing-elements web component** ({origin}); "
            "it holds a plain table instead."
        )
    else:
        md.append(
            "mutation.html renders mutation.json (schema v2) with the mutation-testing-elements component, "
            f"inlined from {origin}."
        )
    md.append("")
    return md


def findings_section(problems: list[str], notes: list[str]) -> list[str]:
    """The Problems and Notes lists of mutation.md, each left out when empty."""
    md = []
    if problems:
        md += ["## Problems", ""] + [f"- {md_cell(p)}" for p in problems] + [""]
    if notes:
        md += ["## Notes", ""] + [f"- {md_cell(n)}" for n in notes] + [""]
    return md


def markdown(
    title: str,
    problems: list[str],
    notes: list[str],
    curated: dict | None,
    results: dict | None,
    summary: dict | None,
    timings: dict,
    baseline: float | None,
    js: str | None,
    origin: str,
) -> str:
    """The text of mutation.md."""
    md = header_section(title, bool(problems), curated, results, js, origin) + findings_section(problems, notes)
    if curated is not None:
        md += curated_section(curated)
    else:
        md += ["## Curated known-bug mutants", "", "Not run in this session.", ""]
    if results is not None and summary is not None:
        md += mutmut_section(results, summary, timings, baseline)
    else:
        md += ["## mutmut over the statistics code", "", "Not run in this session.", ""]
    return "\n".join(md).rstrip() + "\n"


# ---------------------------------------------------------------- checks and the reports


def curated_findings(curated: dict) -> tuple[list[str], list[str]]:
    """(problems, notes) of the curated run: a control that did not pass, a mutant neither killed nor skipped."""
    problems: list[str] = []
    notes: list[str] = []
    for command, control in (curated.get("controls") or {"verify": curated.get("control", {})}).items():
        if not control.get("passed"):
            problems.append(f"curated: the control run ({command}, unmodified trainer) did not pass")
    for r in curated["mutants"]:
        if r["status"] not in ("killed", "not run"):
            problems.append(
                f"curated: {r['id']} {r['status']}" + (f": {r['reason'].splitlines()[0]}" if r.get("reason") else "")
            )
        elif r["status"] == "not run":
            notes.append(f"curated: {r['id']} not run: {r['reason']}")
    return problems, notes


def triage_findings(results: dict) -> tuple[list[str], list[str]]:
    """(problems, notes) of triaging the mutmut records against mutants/equivalent.toml (marks the records)."""
    entries, problems = load_triage()
    more, notes = triage(results["mutants"], entries)
    return problems + more, notes


def record_baseline(path: Path, data: dict, results: dict, summary: dict) -> float:
    """Write this run's mutmut score to the baseline file; returns the new baseline."""
    data["mutmut"] = {
        "score": summary["score"],
        "total": summary["total"],
        "functions": results["functions"],
        "recorded": time.strftime("%Y-%m-%d"),
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return summary["score"]


def mutmut_problems(results: dict, summary: dict, baseline: float | None, baseline_name: str) -> list[str]:
    """What fails the session in the mutmut run: unchecked mutants, mutmut's exit code, a score below the baseline."""
    problems = []
    pending = summary["counts"].get("not checked", 0)
    if pending:
        problems.append(f"mutmut: {pending} mutant(s) were never checked")
    if results.get("mutmut_exit_code") not in (0, None):
        problems.append(f"mutmut exited {results['mutmut_exit_code']}")
    if baseline is None:
        problems.append(f"{baseline_name} has no mutmut score to hold the line")
    elif summary["score"] is None or summary["score"] < baseline - 1e-9:
        problems.append(f"mutmut score {summary['score']} % is below the baseline {baseline:.2f} %")
    return problems


def print_outcome(
    report_dir: Path, summary: dict | None, baseline: float | None, js: str | None, problems: list[str]
) -> None:
    """The terminal summary: the mutmut score, the files written, and each problem on stderr."""
    if summary is not None:
        print(
            f"mutmut score {summary['score']} % (baseline {baseline}); {summary['total']} mutants: "
            + ", ".join(f"{n} {k}" for k, n in sorted(summary["counts"].items()))
        )
    print(
        f"wrote {report_dir / 'mutation.md'}, mutation.json, mutation.html"
        + ("" if js else " (WITHOUT the web component)")
    )
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)


def write_reports(
    report_dir: Path = ROOT / "reports", install_elements: bool = True, update_baseline: bool = False
) -> int:
    """Write mutation.md/.json/.html from whatever ran; exit 1 when a problem fails the session."""
    report_dir.mkdir(parents=True, exist_ok=True)
    curated = load_json(report_dir / "curated.json")
    results = load_json(report_dir / "mutmut_results.json")
    if curated is None and results is None:
        print(f"error: nothing to report in {report_dir}: run `python -m mutants curated` or `mutmut` first")
        return 2
    baseline_path = HERE / "baseline.json"
    baseline_data = load_json(baseline_path) or {}
    baseline = (baseline_data.get("mutmut") or {}).get("score")
    # the source mutmut's locations refer to: the trainer as it was copied for the mutmut run
    source = (results or {}).get("source") or (ROOT / TRAINER).read_text(encoding="utf-8")
    problems, notes = curated_findings(curated) if curated is not None else ([], [])

    summary, timings = None, {}
    if results is not None:
        more, triage_notes = triage_findings(results)
        problems += more
        notes += triage_notes
        summary = score(results["mutants"])
        timings = timing(results)
        if update_baseline and summary["score"] is not None:
            baseline = record_baseline(baseline_path, baseline_data, results, summary)
            notes.append(f"baseline updated to {baseline:.2f} %")
        problems += mutmut_problems(results, summary, baseline, baseline_path.name)

    report, unplaced = schema_report(curated, results, source, baseline)
    if unplaced:
        notes.append(
            f"curated mutant(s) {', '.join(unplaced)} are left out of mutation.json: their patch does not match "
            "the trainer source of the mutmut run (rerun both)"
        )
    problems += [f"mutation.json: {p}" for p in validate(report)]
    (report_dir / "mutation.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    js, origin = find_elements(install_elements)
    title = "PPO statistics gate: mutation testing"
    (report_dir / "mutation.html").write_text(render_html(report, js, title), encoding="utf-8")
    md = markdown(title, problems, notes, curated, results, summary, timings, baseline, js, origin)
    (report_dir / "mutation.md").write_text(md, encoding="utf-8")
    print_outcome(report_dir, summary, baseline, js, problems)
    return 1 if problems else 0
