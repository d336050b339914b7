"""The mutmut run's records: each mutant, mutmut's test statistics, the kill costs, mutmut_results.json.

The driver writes mutmut_results.json from a MutmutResults (`to_dict`) in the
project, after mutmut ran in its scratch copy; the report reads it back into one
(`from_dict`), and adds each survivor's triage (TriageEntry, from
mutants/equivalent.toml) to its record.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .location import Location
from .status import MutantStatus, TriageVerdict

SKIPPED_SURVIVOR = "missing-check, not run"
"""The outcome of a triaged missing-check survivor that the run skipped (it counts as undetected)."""


@dataclass(frozen=True)
class MutantCost:
    """A killed mutant's wall time against the first test mutmut runs for it, taken as the one that killed it."""

    first_test: str | None
    first_test_seconds: float | None
    cost_ratio: float | None

    def to_dict(self) -> dict:
        """The cost as the mutant's record in mutmut_results.json carries it, flat."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class MutantRecord:
    """One mutmut mutant of a mutated file: what mutmut made of it, where it is, what it changed, and its triage."""

    name: str
    function: str
    exit_code: int | None
    status: MutantStatus
    seconds: float | None
    estimated_test_seconds: float | None
    location: Location
    line: str
    original: str
    replacement: str
    mutator: str
    diff: str
    cost: MutantCost | None = None
    """Set for each killed mutant with a wall time (see scoring.kill_costs)."""
    verdict: TriageVerdict | None = None
    """Set by the triage, on a survivor only; never written to mutmut_results.json, which precedes the triage."""
    why: str = ""
    file: str = "reference_trainers/ppo.py"
    """The mutated file, relative to the project root (its `location` counts in that file)."""
    column: int | None = None
    """1-based column of the change counted from the line's first non-blank character (0 or less where it begins in
    the indentation, as an argument removed with its line): part of the triage key (keys.py)."""
    occurrence: int | None = None
    """Which of the function's lines whose stripped text is `line` (1-based); None when there is only one."""

    @property
    def short(self) -> str:
        """mutmut's name without its module path (x_masked_mean__mutmut_3), as the reports show it."""
        return self.name.rpartition(".")[2]

    @property
    def equivalent(self) -> bool:
        """Whether the triage says no run can tell it from the original, which takes it out of the score."""
        return self.verdict is TriageVerdict.EQUIVALENT

    @property
    def skipped_survivor(self) -> bool:
        """Whether the run skipped it as a triaged missing-check survivor: not run, counted as undetected."""
        return self.status is MutantStatus.SKIPPED and self.verdict is TriageVerdict.MISSING_CHECK

    @property
    def outcome(self) -> str:
        """The word the counts and tables file it under: "equivalent" for a survivor triaged so, "missing-check,
        not run" for a triaged survivor the run skipped, else its status."""
        if self.equivalent:
            return "equivalent"
        return SKIPPED_SURVIVOR if self.skipped_survivor else self.status.text

    def to_dict(self) -> dict:
        """The record as mutmut_results.json stores it (the cost's fields flat, where there is one)."""
        data = {
            "name": self.name,
            "file": self.file,
            "function": self.function,
            "exit_code": self.exit_code,
            "status": self.status.text,
            "seconds": self.seconds,
            "estimated_test_seconds": self.estimated_test_seconds,
            "location": self.location.to_dict(),
            "line": self.line,
            "original": self.original,
            "replacement": self.replacement,
            "mutator": self.mutator,
            "diff": self.diff,
            "column": self.column,
            "occurrence": self.occurrence,
        }
        if self.cost is not None:
            data.update(self.cost.to_dict())
        if self.verdict is not None:
            data.update(verdict=self.verdict.value, why=self.why)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> MutantRecord:
        """A record read back from mutmut_results.json; its status is the one the file says."""
        cost = None
        if "first_test" in data:
            cost = MutantCost(data["first_test"], data["first_test_seconds"], data["cost_ratio"])
        return cls(
            data["name"],
            data["function"],
            data.get("exit_code"),
            MutantStatus(data["status"]),
            data.get("seconds"),
            data.get("estimated_test_seconds"),
            Location.from_dict(data["location"]),
            data.get("line", ""),
            data["original"],
            data["replacement"],
            data["mutator"],
            data.get("diff", ""),
            cost,
            TriageVerdict(data["verdict"]) if data.get("verdict") else None,
            data.get("why", ""),
            data.get("file", "reference_trainers/ppo.py"),
            data.get("column"),
            data.get("occurrence"),
        )


@dataclass(frozen=True)
class SuiteStats:
    """mutmut's per-test statistics from its stats run: each test's duration, and the tests it links to functions."""

    duration_by_test: dict[str, float]
    stats_time: float | None
    tests_by_function: dict[str, list[str]]

    def to_dict(self) -> dict:
        """The statistics as mutmut_results.json stores them under `tests`."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SuiteStats | None:
        """The statistics read back from JSON; None where the stats run left none (`{}`)."""
        if not data:
            return None
        return cls(data.get("duration_by_test") or {}, data.get("stats_time"), data.get("tests_by_function") or {})


@dataclass(frozen=True)
class KillCost:
    """The killed mutants' costs against their killing tests, summed up against the issue's goal (COST_GOAL)."""

    killed: int
    measured: int
    goal_ratio: float
    median_ratio: float | None
    p90_ratio: float | None
    share_under_goal: float | None
    goal_met: bool | None
    mean_seconds: float | None
    median_seconds: float | None
    median_first_test_seconds: float | None
    first_tests: dict[str, int]
    """How many killed mutants each first test is taken to have killed, most first."""

    def to_dict(self) -> dict:
        """The summary as mutmut_results.json stores it under `kill_cost`."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> KillCost:
        """The summary read back from JSON."""
        return cls(**data)


@dataclass(frozen=True)
class MutmutResults:
    """mutmut_results.json: the run, the source its locations refer to, every mutant, the test stats, kill costs."""

    mutmut_exit_code: int | None
    seconds: float | None
    max_children: int | None
    functions: tuple[str, ...]
    file: str
    source: str
    mutants: tuple[MutantRecord, ...]
    tests: SuiteStats | None = None
    kill_cost: KillCost | None = None
    finished: str | None = None
    sources: dict[str, str] = dataclasses.field(default_factory=dict)
    """Every mutated file's source by path, as mutmut ran over it; `file` and `source` are the trainer's."""
    selected: tuple[str, ...] = ()
    """The functions a `--functions` run covered (its mutants are theirs only); empty for a run over whole files."""
    algorithm: str = "ppo"
    """Whose trainer mutmut mutated (mutmut_algorithms.ALGORITHMS); results written before GRPO runs are PPO's."""

    @property
    def partial(self) -> bool:
        """Whether the run covered only some functions of the mutated files."""
        return bool(self.selected)

    def to_dict(self) -> dict:
        """The run as mutmut_results.json stores it (`tests` is {} where the stats run left none)."""
        return {
            "mutmut_exit_code": self.mutmut_exit_code,
            "seconds": self.seconds,
            "max_children": self.max_children,
            "functions": list(self.functions),
            "file": self.file,
            "source": self.source,
            "mutants": [r.to_dict() for r in self.mutants],
            "tests": {} if self.tests is None else self.tests.to_dict(),
            "kill_cost": None if self.kill_cost is None else self.kill_cost.to_dict(),
            "finished": self.finished,
            "sources": dict(self.sources),
            "selected": list(self.selected),
            "algorithm": self.algorithm,
        }

    @classmethod
    def from_dict(cls, data: dict) -> MutmutResults:
        """The run read back from mutmut_results.json."""
        kill_cost = data.get("kill_cost")
        return cls(
            data.get("mutmut_exit_code"),
            data.get("seconds"),
            data.get("max_children"),
            tuple(data["functions"]),
            data["file"],
            data.get("source", ""),
            tuple(MutantRecord.from_dict(r) for r in data["mutants"]),
            SuiteStats.from_dict(data.get("tests") or {}),
            None if kill_cost is None else KillCost.from_dict(kill_cost),
            data.get("finished"),
            dict(data.get("sources") or {}),
            tuple(data.get("selected") or ()),
            data.get("algorithm") or "ppo",
        )


@dataclass(frozen=True)
class TriageEntry:
    """One survivor's triage in mutants/equivalent.toml, keyed by what the mutant is, not by mutmut's number.

    The key: the function (`name` or `Class.method`), the stripped source line, the 1-based column of the
    change in that stripped line (0 or less where it begins in the indentation), the replaced text and its
    replacement, and `occurrence` where the same line text appears more than once in the function. An entry
    follows its mutant when lines are added or moved, and matches nothing once the line or the change is gone.
    `name` (mutmut's number when it was triaged) is information only, kept from files of the old format; it
    never decides a match. An entry without `column` (the old format) matches only where `original` occurs once
    in the line.
    """

    function: str
    line: str
    column: int | None
    original: str
    replacement: str
    verdict: TriageVerdict
    why: str
    occurrence: int | None = None
    name: str = ""

    REQUIRED = ("line", "original", "replacement", "verdict", "why")
    """The keys every `[[mutant]]` table must have; `function` too, or else an old-format `name` to derive it."""

    @property
    def key(self) -> tuple:
        """What the entry describes: (function, line, column, occurrence, original, replacement)."""
        return (self.function, self.line, self.column, self.occurrence, self.original, self.replacement)

    def describe(self) -> str:
        """The entry in one line, as the problems and the triage command name it."""
        where = f"{self.function}: `{self.line}`"
        if self.occurrence is not None:
            where += f" (occurrence {self.occurrence})"
        column = "" if self.column is None else f" at column {self.column}"
        return f"{where}{column}: {self.original!r} -> {self.replacement!r} ({self.verdict.value})"

    def matches(self, record: MutantRecord) -> bool:
        """Whether `record` is the change this entry triaged: same function, line text, column, occurrence,
        replaced text and replacement (`keys.describe` gives a record its column and occurrence)."""
        if (self.function, self.line, self.occurrence, self.original, self.replacement) != (
            record.function,
            record.line,
            record.occurrence,
            record.original,
            record.replacement,
        ):
            return False
        if self.column is not None:
            return self.column == record.column
        return self.original != "" and self.line.count(self.original) == 1  # old format: one place it can be

    def to_dict(self) -> dict:
        """The entry as a `[[mutant]]` table of equivalent.toml holds it (no None values, no empty name)."""
        data = {
            "function": self.function,
            "line": self.line,
            "column": self.column,
            "occurrence": self.occurrence,
            "original": self.original,
            "replacement": self.replacement,
            "verdict": self.verdict.value,
            "why": self.why,
            "name": self.name,
        }
        return {k: v for k, v in data.items() if v is not None and v != "" or k in ("original", "replacement")}

    @classmethod
    def from_dict(cls, data: dict) -> TriageEntry:
        """An entry read from equivalent.toml (scoring.load_triage checks its keys and verdict first).

        An old-format entry (no `function`) takes its function from `name`, mutmut's name of the mutant.
        """
        name = data.get("name", "")
        function = data.get("function") or function_of_name(name)
        return cls(
            function,
            data["line"],
            data.get("column"),
            data["original"],
            data["replacement"],
            TriageVerdict(data["verdict"]),
            data["why"],
            data.get("occurrence"),
            name,
        )


def function_of_name(name: str) -> str:
    """The function (`f` or `Class.method`) of mutmut's mutant name; "" for a name that is not one."""
    generated = name.rpartition(".")[2]
    base, sep, _ = generated.rpartition("__mutmut_")
    if not sep:
        return ""
    if base.startswith("x\u01c1"):
        cls, _, method = base[2:].partition("\u01c1")
        return f"{cls}.{method}"
    return base.removeprefix("x_")
