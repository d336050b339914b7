"""The numbers of the mutmut run, each computed once: triage of its survivors, the score, timing, kill costs.

The triage file (mutants/equivalent.toml for PPO, mutants/equivalent_grpo.toml for GRPO)
gives every survivor a verdict, each entry keyed by what its mutant is (function, line, column, occurrence,
original, replacement: model.TriageEntry, keys.py), never by mutmut's number for it:
"equivalent" mutants leave the score, "missing-check" survivors count as survived
(known gaps of the gate, listed so that someone closes them).

Score: (killed + timeout) / (killed + timeout + survived + no tests), survivors
triaged "equivalent" left out of both.

Kill cost: each killed mutant's wall time against the test that killed it. The
driver computes it once, when it writes mutmut_results.json; `timing` takes it
from there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from .model import (
    SKIPPED_SURVIVOR,
    KillCost,
    MutantCost,
    MutantRecord,
    MutantStatus,
    MutmutResults,
    SuiteStats,
    TriageEntry,
    TriageVerdict,
)
from .selection import function_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
COST_GOAL = 1.5  # the goal: a killed mutant costs under 1.5x the time of the test that killed it


def load_toml(path: Path) -> dict:
    """The TOML file at `path`, or {} when there is none (no triage file means no survivor is triaged)."""
    if not path.is_file():
        return {}
    return tomllib.loads(path.read_text(encoding="utf-8"))


def load_triage(path: Path = HERE / "equivalent.toml") -> tuple[list[TriageEntry], list[str]]:
    """The entries of the triage file, in its order, and the problems with them.

    An entry is keyed by what its mutant is (TriageEntry): function, line, column, occurrence, original,
    replacement. Entries of the old format (keyed by mutmut's `name`, no `function` or `column`) load too:
    their function comes from the name, and `python -m mutants triage refresh` writes them in the new format.
    """
    entries: list[TriageEntry] = []
    problems: list[str] = []
    seen: dict[tuple, int] = {}
    verdicts = tuple(v.value for v in TriageVerdict)
    for i, entry in enumerate(load_toml(path).get("mutant", [])):
        label = f"{path.name} entry {i + 1}"
        missing = [k for k in TriageEntry.REQUIRED if k not in entry]
        if "function" not in entry and not function_name_of(entry.get("name", "")):
            missing.insert(0, "function")
        if missing:
            problems.append(f"{label}: missing {', '.join(missing)}")
            continue
        if entry["verdict"] not in verdicts:
            problems.append(f"{label}: verdict must be one of {verdicts}, not {entry['verdict']!r}")
            continue
        if "column" in entry and type(entry["column"]) is not int:
            problems.append(f"{label}: column must be a whole number")
            continue
        if "occurrence" in entry and not (type(entry["occurrence"]) is int and entry["occurrence"] >= 1):
            problems.append(f"{label}: occurrence must be a whole number from 1")
            continue
        parsed = TriageEntry.from_dict(entry)
        if not parsed.why.strip():
            problems.append(f"{label} ({parsed.function}): empty why")
        # old-format entries (no column) of one line and change differ by mutmut's name until `triage refresh`
        same = (*parsed.key, parsed.name if parsed.column is None else "")
        if same in seen:
            problems.append(f"{label} triages the same mutant as entry {seen[same]}: {parsed.describe()}")
        seen.setdefault(same, i + 1)
        entries.append(parsed)
    return entries, problems


def function_name_of(name: str) -> str:
    """The function of mutmut's mutant `name`, "" for anything else (an old-format entry's way to its function)."""
    return function_name(name) if "__mutmut_" in name else ""


def now_there(entry: TriageEntry, records, limit: int = 6) -> str:
    """What mutmut made now where a stale entry was: the mutants of its line, else of its change, in its function."""
    same_function = [r for r in records if r.function == entry.function]
    if not same_function:
        return f"mutmut made no mutant of {entry.function} (renamed or removed?)"
    here = [r for r in same_function if r.line == entry.line]
    where = "at that line"
    if not here:
        here = [r for r in same_function if (r.original, r.replacement) == (entry.original, entry.replacement)]
        where = f"the line is gone from {entry.function}; that change elsewhere in it"
    if not here:
        return f"the line is gone from {entry.function}, and so is that change"
    shown = "; ".join(
        f"{r.original!r} -> {r.replacement!r}"
        + (f" at column {r.column}" if r.column is not None else "")
        + (f" (occurrence {r.occurrence})" if r.occurrence is not None else "")
        + (f" in `{r.line}`" if r.line != entry.line else "")
        + f" [{r.short}, {r.status.text}]"
        for r in here[:limit]
    )
    more = f"; and {len(here) - limit} more" if len(here) > limit else ""
    return f"mutmut made {where}: {shown}{more}"


def triage(
    records: tuple[MutantRecord, ...],
    entries: list[TriageEntry],
    selected: tuple[str, ...] = (),
    triage_file: str = "equivalent.toml",
) -> tuple[tuple[MutantRecord, ...], list[str], list[str]]:
    """The records with each survivor's verdict and why from the triage file, and its (problems, notes).

    The records must carry their column and occurrence (keys.describe). An entry applies to the mutants it
    describes, whatever mutmut numbered them; an entry that describes no mutant is stale, reported once with
    what mutmut made at its line now. `selected`: the functions a `--functions` run covered; an entry of another
    function is then not looked at. `triage_file`: the file the entries come from (in mutants/), named in the
    problems.
    """
    by_change: dict[tuple, list[TriageEntry]] = {}
    for entry in entries:
        by_change.setdefault(
            (entry.function, entry.line, entry.occurrence, entry.original, entry.replacement), []
        ).append(entry)
    used: set[int] = set()
    triaged, problems, notes = [], [], []
    for r in records:
        candidates = by_change.get((r.function, r.line, r.occurrence, r.original, r.replacement), [])
        matching = [e for e in candidates if e.matches(r)]
        used.update(id(e) for e in matching)
        # a skipped mutant is one the hooks plugin found triaged: its triage applies as to a survivor
        unkilled = r.status.undetected or r.status is MutantStatus.SKIPPED
        if len(matching) > 1:
            problems.append(f"{r.short} ({r.function}) is triaged by {len(matching)} entries of mutants/{triage_file}")
        if not matching:
            if unkilled:
                at = r.location.start.line if r.location.start else "?"
                problems.append(
                    f"untriaged survivor {r.short} ({r.function}, line {at}): {r.original!r} -> {r.replacement!r} "
                    f"in `{r.line}`; triage it in mutants/{triage_file} "
                    f"(python -m mutants triage add {r.short} --verdict ... --why ...) or add a check"
                )
        elif unkilled:
            r = dataclasses.replace(r, verdict=matching[0].verdict, why=matching[0].why)
        else:
            notes.append(
                f"{r.short} ({matching[0].describe()}) is triaged but is now {r.status.text}: drop its entry"
            )
        triaged.append(r)
    for entry in entries:
        if id(entry) in used or (selected and entry.function not in selected):
            continue
        problems.append(
            f"stale triage in mutants/{triage_file}: {entry.describe()}"
            + (f" (was {entry.name.rpartition('.')[2]})" if entry.name else "")
            + f" describes no mutant now; {now_there(entry, records)}. Re-triage: python -m mutants triage"
        )
    return tuple(triaged), problems, notes


@dataclass(frozen=True)
class Score:
    """The mutmut records counted by outcome, and the mutation score (percent; None when no mutant counts)."""

    total: int
    counts: dict[str, int]
    """{status word, or "equivalent": number of mutants}, in the order first met."""
    detected: int
    undetected: int
    missing_check: int
    score: float | None
    unjudged: int = 0
    """Mutants the run gave no verdict on (MutantStatus.unjudged): in neither side of the score."""


def score(records: tuple[MutantRecord, ...]) -> Score:
    """Counts and the mutation score of the mutmut records (after `triage`, which takes equivalents out)."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    detected = sum(counts.get(s.text, 0) for s in MutantStatus if s.detected)
    undetected = sum(counts.get(s.text, 0) for s in MutantStatus if s.undetected) + counts.get(SKIPPED_SURVIVOR, 0)
    valid = detected + undetected
    return Score(
        total=len(records),
        counts=counts,
        detected=detected,
        undetected=undetected,
        missing_check=sum(1 for r in records if r.verdict is TriageVerdict.MISSING_CHECK),
        score=round(100.0 * detected / valid, 2) if valid else None,
        unjudged=sum(counts.get(s.text, 0) for s in MutantStatus if s.unjudged),
    )


@dataclass(frozen=True)
class Timing:
    """How long the mutmut run took, per mutant and in all, and the kill costs the driver stored."""

    seconds: float | None
    mutants_per_minute: float | None
    mean_seconds_killed: float | None
    mean_seconds_survived: float | None
    suite_seconds: float | None
    kill_cost: KillCost | None
    workers: int | None


def mean(xs: list[float]) -> float | None:
    """The mean of `xs`, None for none (a run with no killed, or no surviving, mutant)."""
    return sum(xs) / len(xs) if xs else None


def timing(results: MutmutResults) -> Timing:
    """Throughput, the mean cost per mutant, and each killed mutant's cost against the test that killed it."""
    checked = [r for r in results.mutants if r.seconds is not None]
    tests = results.tests.duration_by_test if results.tests else {}
    return Timing(
        seconds=results.seconds,
        mutants_per_minute=60.0 * len(checked) / results.seconds if results.seconds else None,
        mean_seconds_killed=mean([r.seconds for r in checked if r.status is MutantStatus.KILLED]),
        mean_seconds_survived=mean([r.seconds for r in checked if r.status is MutantStatus.SURVIVED]),
        suite_seconds=sum(tests.values()) if tests else None,
        kill_cost=results.kill_cost,
        workers=results.max_children,
    )


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


def kill_costs(records: list[MutantRecord], stats: SuiteStats | None) -> tuple[dict[str, MutantCost], KillCost]:
    """The cost of each killed mutant against the test that killed it, and their summary.

    Per killed mutant: mutmut's wall time for it (`seconds`, its meta file's durations_by_key:
    fork of the worker to its exit, a whole `pytest -x` session) over the stats-run duration of
    the first test mutmut runs for it (`first_test`), taken as the killer. A later test that
    killed it is slower, so the ratio is then an upper bound. Returns ({name: cost}, summary).
    """
    durations = stats.duration_by_test if stats else {}
    tests_by_function = stats.tests_by_function if stats else {}
    per_mutant: dict[str, MutantCost] = {}
    for r in records:
        if r.status is not MutantStatus.KILLED or r.seconds is None:
            continue
        test = first_test(tests_by_function.get(r.function, ()), durations)
        test_seconds = durations.get(test, 0.0) if test else None
        ratio = r.seconds / test_seconds if test_seconds else None
        per_mutant[r.name] = MutantCost(test, test_seconds, ratio)
    measured = [c for c in per_mutant.values() if c.cost_ratio is not None]
    ratios = [c.cost_ratio for c in measured]
    seconds = [r.seconds for r in records if r.name in per_mutant]
    first_tests: dict[str, int] = {}
    for c in measured:
        first_tests[c.first_test] = first_tests.get(c.first_test, 0) + 1
    p90 = percentile(ratios, 90)
    summary = KillCost(
        killed=len(per_mutant),
        measured=len(ratios),
        goal_ratio=COST_GOAL,
        median_ratio=percentile(ratios, 50),
        p90_ratio=p90,
        share_under_goal=sum(x < COST_GOAL for x in ratios) / len(ratios) if ratios else None,
        goal_met=p90 < COST_GOAL if p90 is not None else None,
        mean_seconds=sum(seconds) / len(seconds) if seconds else None,
        median_seconds=percentile(seconds, 50),
        median_first_test_seconds=percentile([c.first_test_seconds for c in measured], 50),
        first_tests=dict(sorted(first_tests.items(), key=lambda kv: (-kv[1], kv[0]))),
    )
    return per_mutant, summary
