"""What live mode reports of one checked logging interval, whatever the algorithm: its result (`IntervalResult`,
made by the algorithm's check of an interval), the keys its verdict is logged under beside the trainer's own
(`live/<name>_expected`, `_gap`, `_pass`, `live/pass`), the lines of a failing metric, the run's summary, and what
an adapter gives of its session (`Held`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.verdict import MetricStatus, MetricVerdict

EXPECTED_PREFIX = "live/"
EXPECTED_SUFFIX = "_expected"
"""A checked metric's expected value is logged as `live/<name>_expected`, beside the trainer's `<name>`."""
GAP_SUFFIX = "_gap"
PASS_SUFFIX = "_pass"
PASS_KEY = f"{EXPECTED_PREFIX}pass"
"""The interval's verdict on the dashboard: 1.0 when every verdict of the interval passed, else 0.0."""


def expected_key(name: str) -> str:
    """`live/entropy_expected` for `entropy`."""
    return f"{EXPECTED_PREFIX}{name}{EXPECTED_SUFFIX}"


def gap_key(name: str) -> str:
    """`live/entropy_gap` for `entropy`: |logged - expected|, the gap the verdict judged."""
    return f"{EXPECTED_PREFIX}{name}{GAP_SUFFIX}"


def pass_key(name: str) -> str:
    """`live/entropy_pass` for `entropy`: 1.0 for a pass, 0.0 for a fail."""
    return f"{EXPECTED_PREFIX}{name}{PASS_SUFFIX}"


@dataclass(frozen=True)
class IntervalResult:
    """What the live check found for one logging interval."""

    interval: int
    """The run's logging interval as the oracle indexes it, from 0 (`log - 1`); everything the live check shows a
    user counts logs from 1 (`log`)."""
    step: int
    """The optimizer steps done when the trainer logged it."""
    micro_batches: int
    """Micro-batches in the interval (merged across ranks: the trainer's own micro-batch statistics)."""
    ranks: int
    tokens: int
    """Completion tokens in the interval, every rank."""
    verdicts: tuple[MetricVerdict, ...]
    not_checked: tuple[str, ...] = ()
    """What was not checked in this interval, and why, in words: contract metrics the trainer did not log, the
    gradient check where the records do not determine it."""
    problem: str = ""
    """Why the interval could not be checked at all (unusable records), or ''."""
    seconds: float = 0.0
    """Wall time of the check itself (merging, oracle, comparison, diagnosis)."""
    cpu_seconds: float = 0.0
    """Process CPU time of the check itself."""
    logged_names: frozenset[str] = frozenset()
    """The metrics of the algorithm's contract: those whose expected value, gap and pass go to the trainer's logs
    (the logit gaps and the gradient gap are not metrics the trainer logs)."""

    @property
    def log(self) -> int:
        """The interval's place among the run's logs, counted from 1 (`log 1` is the first log): the counting of
        every line, report and option (`first`) of the live check."""
        return self.interval + 1

    @property
    def failed(self) -> bool:
        """A checked metric failed, or the records could not be checked."""
        return bool(self.problem) or any(v.failed for v in self.verdicts)

    @property
    def expected(self) -> dict[str, float]:
        """The oracle's value of each checked metric of the contract that has one (the logit gaps and the gradient
        gap are not metrics the trainer logs)."""
        return {v.name: v.expected for v in self.verdicts if v.expected is not None and v.name in self.logged_names}

    def classes(self) -> list[int]:
        """The bug classes the diagnoses name, in order, each once."""
        out: list[int] = []
        for v in self.verdicts:
            for c in v.diagnosis.classes if v.diagnosis else ():
                if c not in out:
                    out.append(c)
        return out

    def dashboard(self) -> dict[str, float]:
        """What the trainer's loggers get for this interval, beside what it logged: per checked metric of the
        contract `live/<name>_expected`, `live/<name>_gap` (|logged - expected|) and `live/<name>_pass` (1.0 or
        0.0), and `live/pass` for the whole interval (the gradient and logit-gap verdicts included)."""
        out: dict[str, float] = {}
        for v in self.verdicts:
            if v.name not in self.logged_names:
                continue
            if v.expected is not None:
                out[expected_key(v.name)] = float(v.expected)
            if v.abs_err is not None:
                out[gap_key(v.name)] = float(v.abs_err)
            out[pass_key(v.name)] = 0.0 if v.failed else 1.0
        out[PASS_KEY] = 0.0 if self.failed else 1.0
        return out

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the interval's JSON report (`log-0001.json` for log 1)."""
        return {
            "log": self.log,
            "step": self.step,
            "status": "fail" if self.failed else "pass",
            "micro_batches": self.micro_batches,
            "ranks": self.ranks,
            "tokens": self.tokens,
            "classes": self.classes(),
            "problem": self.problem,
            "not_checked": list(self.not_checked),
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "metrics": [v.as_dict() for v in self.verdicts],
        }


def verdict_line(v: MetricVerdict) -> str:
    """One line per failing metric: the gate's failure line, then its diagnosis (or why there is none)."""
    from harness.report.format import diagnosis_text, failure_line

    line = failure_line("live", v)
    said = diagnosis_text(v)
    return f"{line} {said}" if said else line


def failing(result: IntervalResult) -> list[MetricVerdict]:
    """The interval's failing verdicts (not-recomputable ones included: the live check needs every value)."""
    return [v for v in result.verdicts if v.failed or v.status is MetricStatus.NOT_RECOMPUTABLE]


@dataclass
class Summary:
    """Intervals checked, passed and failed over the run, those that could not be checked, and what the checks
    cost. Logs are counted from 1, as in every line of the live check."""

    checked: int = 0
    passed: int = 0
    failed: int = 0
    classes: list[int] = field(default_factory=list)
    cpu_seconds: float = 0.0
    seconds: float = 0.0
    record_seconds: float = 0.0
    """CPU time spent recording (copies of the loss's inputs and outputs) in the checked intervals."""
    failed_logs: list[int] = field(default_factory=list)
    unchecked_logs: list[int] = field(default_factory=list)
    """Sampled logs that could not be checked (an error of the live check itself, said in a WARNING line)."""
    stopped_at_log: int | None = None
    """The log after which `raise_on_failure` stopped the run, or None."""

    def add(self, result: IntervalResult) -> None:
        self.checked += 1
        if result.failed:
            self.failed += 1
            self.failed_logs.append(result.log)
        else:
            self.passed += 1
        for c in result.classes():
            if c not in self.classes:
                self.classes.append(c)
        self.cpu_seconds += result.cpu_seconds
        self.seconds += result.seconds

    def unchecked(self, log: int) -> None:
        """Log `log` (from 1) was sampled but could not be checked."""
        if log not in self.unchecked_logs:
            self.unchecked_logs.append(log)

    def line(self) -> str:
        """`live check: 3 interval(s) checked, 1 passed, 2 failed (class 16), failed: logs 1, 21; ...`."""
        named = f" (class {', '.join(map(str, self.classes))})" if self.classes else ""
        failed = f", failed: logs {', '.join(map(str, self.failed_logs))}" if self.failed else ""
        unchecked = (f", not checked: logs {', '.join(map(str, self.unchecked_logs))} (errors of the check, "
                     "above)") if self.unchecked_logs else ""  # fmt: skip
        stopped = f", run stopped after log {self.stopped_at_log} (raise_on_failure)" if self.stopped_at_log else ""
        return (f"live check: {self.checked} interval(s) checked, {self.passed} passed, {self.failed} failed"
                f"{named}{failed}{unchecked}{stopped}; check cost {self.cpu_seconds:.3f} s CPU")  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "passed": self.passed,
            "failed": self.failed,
            "failed_logs": list(self.failed_logs),
            "unchecked_logs": list(self.unchecked_logs),
            "stopped_at_log": self.stopped_at_log,
            "classes": list(self.classes),
            "check_cpu_seconds": self.cpu_seconds,
            "check_seconds": self.seconds,
        }


class Held:
    """What an adapter gives of its session (`self.session`, a `LiveSession`): its summary, results and verdict."""

    session: Any

    @property
    def summary(self) -> Summary:
        return self.session.summary

    @property
    def results(self) -> list[IntervalResult]:
        return self.session.results

    @property
    def failed(self) -> bool:
        """Whether a checked interval failed."""
        return self.session.failed

    def raise_if_failed(self) -> None:
        """Raise `LiveCheckFailed` for the first failing interval (after the run), if any."""
        self.session.raise_if_failed()
