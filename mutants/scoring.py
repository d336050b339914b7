"""The numbers of the mutmut run, each computed once: triage of its survivors, the score, timing, kill costs.

The triage file (mutants/equivalent.toml) gives every survivor a verdict:
"equivalent" mutants leave the score, "missing-check" survivors count as survived
(known gaps of the gate, listed so that someone closes them).

Score: (killed + timeout) / (killed + timeout + survived + no tests), survivors
triaged "equivalent" left out of both.

Kill cost: each killed mutant's wall time against the test that killed it. The
driver computes it once, when it writes mutmut_results.json; the report reads it
back from there.
"""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent

VERDICTS = ("equivalent", "missing-check")
COST_GOAL = 1.5  # the goal: a killed mutant costs under 1.5x the time of the test that killed it


def load_toml(path: Path) -> dict:
    """The TOML file at `path`, or {} when there is none (no triage file means no survivor is triaged)."""
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


def short(name: str) -> str:
    """mutmut's mutant name without its module path (x_masked_mean__mutmut_3), as the reports show it."""
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
        "kill_cost": kill_costs(records, stats)[1],
        "workers": results.get("max_children"),
    }


def first_test(tests, duration_by_test: dict) -> str | None:
    """The test mutmut runs first for a mutant, of the tests it links to the mutant's function.

    mutmut 3 (ForkRunner.submit) runs `pytest -x` over the tests sorted by their stats-run
    duration, fastest first, a missing duration counting 0. It stores only the exit code, not
    which test failed. Equal durations are ordered by name here (mutmut's order among them is a
    set's), which does not change the duration, hence not the ratio.
    """
    return min(tests, key=lambda t: (duration_by_test.get(t, 0.0), t), default=None)


def percentile(values, q: float) -> float | None:
    """The q-th percentile (0-100) of `values`, linear between the closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def kill_costs(records: list[dict], stats: dict) -> tuple[dict, dict]:
    """The cost of each killed mutant against the test that killed it, and their summary.

    Per killed mutant: mutmut's wall time for it (`seconds`, its meta file's durations_by_key:
    fork of the worker to its exit, a whole `pytest -x` session) over the stats-run duration of
    the first test mutmut runs for it (`first_test`), taken as the killer. A later test that
    killed it is slower, so the ratio is then an upper bound. Returns ({name: fields}, summary).
    """
    durations = stats.get("duration_by_test") or {}
    tests_by_function = stats.get("tests_by_function") or {}
    per_mutant = {}
    for r in records:
        if r["status"] != "killed" or r.get("seconds") is None:
            continue
        test = first_test(tests_by_function.get(r["function"], ()), durations)
        test_seconds = durations.get(test, 0.0) if test else None
        ratio = r["seconds"] / test_seconds if test_seconds else None
        per_mutant[r["name"]] = {"first_test": test, "first_test_seconds": test_seconds, "cost_ratio": ratio}
    measured = {name: c for name, c in per_mutant.items() if c["cost_ratio"] is not None}
    ratios = [c["cost_ratio"] for c in measured.values()]
    seconds = [r["seconds"] for r in records if r["name"] in per_mutant]
    first_tests: dict[str, int] = {}
    for c in measured.values():
        first_tests[c["first_test"]] = first_tests.get(c["first_test"], 0) + 1
    p90 = percentile(ratios, 90)
    summary = {
        "killed": len(per_mutant),
        "measured": len(ratios),
        "goal_ratio": COST_GOAL,
        "median_ratio": percentile(ratios, 50),
        "p90_ratio": p90,
        "share_under_goal": sum(x < COST_GOAL for x in ratios) / len(ratios) if ratios else None,
        "goal_met": p90 < COST_GOAL if p90 is not None else None,
        "mean_seconds": sum(seconds) / len(seconds) if seconds else None,
        "median_seconds": percentile(seconds, 50),
        "median_first_test_seconds": percentile([c["first_test_seconds"] for c in measured.values()], 50),
        "first_tests": dict(sorted(first_tests.items(), key=lambda kv: (-kv[1], kv[0]))),
    }
    return per_mutant, summary
