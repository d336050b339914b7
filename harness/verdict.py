"""The verdict types every stage after the oracle speaks: statuses, check ids, metric and check results.

Results are frozen once made (the model is Hypothesis's `ConjectureData.as_result()`): a
scenario fills a mutable `Check`, then `finish()` turns it into a `CheckResult` that the
report, the suite and the mutant runner read. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class MetricStatus(str, Enum):
    """How one logged metric compared with what it should be."""

    PASS = "pass"
    FAIL = "fail"
    MISSING = "missing"
    """The trainer never logged it."""
    NAN = "nan"
    """The trainer logged NaN or inf (or the expected value is not finite)."""
    NOT_RECOMPUTABLE = "not_recomputable"
    """The records do not determine it; the reason says why."""


class CheckStatus(str, Enum):
    """The verdict of one named check (and, through `overall`, of a run)."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    NOT_APPLICABLE = "not_applicable"
    """The target declares it cannot run the check (`Target.not_applicable`): not run, never a failure; or every
    metric the check compares is one it declares its trainer does not log (`Target.unlogged_metrics`)."""

    @staticmethod
    def overall(statuses: Iterable[CheckStatus | str]) -> CheckStatus:
        """FAIL if any check failed, else ERROR if any errored or none passed (nothing verified), else PASS; a check
        that is not applicable counts for none of them."""
        seen = {CheckStatus(s) for s in statuses}
        if CheckStatus.FAIL in seen:
            return CheckStatus.FAIL
        if CheckStatus.ERROR in seen or CheckStatus.PASS not in seen:
            return CheckStatus.ERROR
        return CheckStatus.PASS


@dataclass(frozen=True, order=True)
class CheckId:
    """A check's name, generated once from its scenario and parameters: `uneven_split[epochs=1]`.

    The report, the verify suite, the mutant catalogue and the docs all print it with `str()`.
    """

    scenario: str
    params: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        if not self.params:
            return self.scenario
        return f"{self.scenario}[{','.join(f'{key}={value}' for key, value in self.params)}]"


@dataclass(frozen=True)
class Diagnosis:
    """A known wrong pooling that reproduces a failing metric's logged value (harness/diagnose.py picks it), or a
    known bug a check found by itself (`Check.diagnose`).

    `classes` are numbers of docs/bug-catalogue.md (two for a combination; none for a wrong pooling the
    catalogue has no number for, e.g. a biased variance); `value` is what `formula` gives from the records,
    `gap` its distance to the logged value (both NaN when no one number is reproduced, as for a check's own).
    """

    classes: tuple[int, ...]
    formula: str
    value: float
    gap: float
    source: str = ""

    @property
    def bug_class(self) -> int | None:
        """The first class named (the one a single-number summary uses), or None."""
        return self.classes[0] if self.classes else None

    def as_dict(self) -> dict[str, Any]:
        """Plain data for verify.json."""
        return {
            "class": self.bug_class,
            "classes": list(self.classes),
            "formula": self.formula,
            "value": _finite(self.value),
            "gap": _finite(self.gap),
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Diagnosis | None:
        """The inverse of `as_dict` (None stays None)."""
        if not data:
            return None
        value, gap = data.get("value"), data.get("gap")
        return cls(
            classes=tuple(data.get("classes") or ()),
            formula=data.get("formula", ""),
            value=math.nan if value is None else value,
            gap=math.nan if gap is None else gap,
            source=data.get("source", ""),
        )


class Wording(str, Enum):
    """Whose words a metric verdict's `reason` is; its failure line reads it by this (harness/report/format.py)."""

    COMPARE = "compare"
    """harness/compare.py's: `<kind>: gap <g> exceeds tolerance <t>` for a fail, or why the metric is missing, not
    finite or not recomputable. A fail's line gives the numbers."""
    FIT = "fit"
    """harness/diagnose.py's `better_fit`: inside the tolerance, but a known wrong formula explains the logged value
    better than the contract's. The line gives the numbers, then the reason."""
    CHECK = "check"
    """The check's own words for what it compared (e.g. the token of a gradient gap): the line gives them instead of
    the numbers."""


@dataclass(frozen=True)
class MetricVerdict:
    """One logged metric against its expected value. `tol` is the allowed gap around `expected`.

    `where` says which of several comparisons of the same metric this is (e.g. `update 2`,
    or the split `bs=2,gas=6,mb=1,epochs=1`); it is never part of `name`.
    """

    name: str
    status: MetricStatus
    logged: float | None = None
    expected: float | None = None
    abs_err: float | None = None
    rel_err: float | None = None
    tol: float | None = None
    reason: str = ""
    where: str | None = None
    required: bool = True
    scale: float | None = None
    """The size of the terms `expected` is made of (the tolerance grows with it); None when unknown."""
    diagnosis: Diagnosis | None = None
    """For a failing metric: the known wrong pooling that reproduces the logged value, when one does."""
    diagnosis_reason: str = ""
    """Why `diagnosis` is None for a failing metric that was diagnosed (e.g. no known pooling reproduces it)."""
    tol_source: str = ""
    """Where `tol` comes from: `derived: ...` from the recorded terms (harness/oracle/precision.py), or the
    tolerance table's `row <metric> at <dtype>`."""
    precision: Any = None
    """The `Precision` the tolerance was derived from (None for a table row): the diagnosis judges candidates by
    it."""
    wording: Wording = Wording.COMPARE
    """Whose words `reason` is (verify.json does not carry it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", MetricStatus(self.status))  # ValueError for an unknown status
        object.__setattr__(self, "wording", Wording(self.wording))

    @property
    def passed(self) -> bool:
        """True for a pass."""
        return self.status is MetricStatus.PASS

    @property
    def failed(self) -> bool:
        """Anything but a pass fails, except a not-recomputable metric the check opted out of."""
        return not self.passed and (self.required or self.status is not MetricStatus.NOT_RECOMPUTABLE)

    @property
    def label(self) -> str:
        """`name @ where` for people; the name alone when there is one comparison."""
        return f"{self.name} @ {self.where}" if self.where else self.name

    def as_dict(self) -> dict[str, Any]:
        """Plain data for verify.json (numbers that are not finite become None)."""
        return {
            "name": self.name,
            "where": self.where,
            "logged": _finite(self.logged),
            "expected": _finite(self.expected),
            "abs_err": _finite(self.abs_err),
            "rel_err": _finite(self.rel_err),
            "tol": _finite(self.tol),
            "scale": _finite(self.scale),
            "status": self.status.value,
            "reason": self.reason,
            "failed": self.failed,
            "diagnosis": self.diagnosis.as_dict() if self.diagnosis else None,
            "diagnosis_reason": self.diagnosis_reason,
            "tol_source": self.tol_source,
            "precision": dataclasses.asdict(self.precision) if self.precision is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricVerdict:
        """The inverse of `as_dict` (for readers of verify.json, such as the mutant runner), but for `wording`, which
        verify.json does not carry: a verdict read back has compare's."""
        numbers = {k: data.get(k) for k in ("logged", "expected", "abs_err", "rel_err", "tol", "scale")}
        return cls(
            name=data["name"],
            status=MetricStatus(data["status"]),
            reason=data.get("reason") or "",
            where=data.get("where"),
            required=not (data["status"] == MetricStatus.NOT_RECOMPUTABLE.value and data.get("failed") is False),
            diagnosis=Diagnosis.from_dict(data.get("diagnosis")),
            diagnosis_reason=data.get("diagnosis_reason") or "",
            tol_source=data.get("tol_source") or "",
            **numbers,
        )


def _finite(value: float | None) -> float | None:
    """`value` when it is a finite number, else None (strict JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class CheckResult:
    """The frozen verdict of one named check: what failed (`problems`), what it noted, each metric, and what the check
    itself diagnosed (`diagnoses`: known bugs it found that no single metric's diagnosis names)."""

    id: CheckId
    status: CheckStatus
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    metrics: tuple[MetricVerdict, ...] = ()
    diagnoses: tuple[Diagnosis, ...] = ()
    contract_changes: tuple[str, ...] = ()
    """For a failed check: one line per change of the contract since the version the target pins that touches it
    (harness/contract.py); they never change the verdict."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", CheckStatus(self.status))  # ValueError for an unknown status

    @property
    def scenario(self) -> str:
        """The scenario this check belongs to."""
        return self.id.scenario

    @property
    def passed(self) -> bool:
        """True when the check passed."""
        return self.status is CheckStatus.PASS

    @property
    def message(self) -> str:
        """Problems, then notes, in one line."""
        return "; ".join(self.problems + self.notes)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for verify.json."""
        return {
            "id": str(self.id),
            "scenario": self.scenario,
            "status": self.status.value,
            "message": self.message,
            "metrics": [m.as_dict() for m in self.metrics],
            "diagnoses": [d.as_dict() for d in self.diagnoses],
            "contract_changes": list(self.contract_changes),
        }


@dataclass
class Check:
    """The mutable builder of one check's result while its scenario runs; `finish()` freezes it."""

    id: CheckId
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics: list[MetricVerdict] = field(default_factory=list)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    inapplicable: str = ""
    """Why it has nothing to compare (`not_applicable`), or ''."""

    @property
    def failed(self) -> bool:
        """True once a problem was recorded or a metric failed."""
        return bool(self.problems) or any(m.failed for m in self.metrics)

    def fail(self, problem: str) -> None:
        """Record why the check fails (once: two steps that read the same run find the same problem)."""
        if problem not in self.problems:
            self.problems.append(problem)

    def note(self, text: str) -> None:
        """Record something a reviewer should read that does not fail the check."""
        self.notes.append(text)

    def diagnose(self, diagnosis: Diagnosis) -> None:
        """Record a known bug the check found (not one metric's: e.g. where the optimizer steps fell), as data; the
        check's notes say it too, `<formula> (class N)`. It does not fail the check."""
        self.diagnoses.append(diagnosis)
        named = f" (class {' + '.join(str(c) for c in diagnosis.classes)})" if diagnosis.classes else ""
        self.note(diagnosis.formula + named)

    def absorb(self, verdicts: Iterable[MetricVerdict]) -> None:
        """Add metric verdicts; any that failed fails the check, naming them once."""
        verdicts = list(verdicts)
        self.metrics.extend(verdicts)
        bad = [m.label for m in verdicts if m.failed]
        if bad:
            self.fail(f"{len(bad)} metric(s) disagree: {', '.join(bad)}")
        for m in verdicts:
            if not m.failed and m.status is MetricStatus.NOT_RECOMPUTABLE:
                self.note(f"{m.label} not recomputable: {m.reason}")

    def not_applicable(self, reason: str) -> None:
        """Record that the metrics a step of the check compares are none the target's trainer logs, as it declares
        (`reason` says so): a check that compared no metric at all is then not applicable, not passed."""
        self.inapplicable = self.inapplicable or reason

    def finish(self) -> CheckResult:
        """The frozen result: FAIL with any problem, else NOT_APPLICABLE when it compared no metric and was told it has
        none to compare (`not_applicable`), else PASS."""
        status = CheckStatus.FAIL if self.problems else CheckStatus.PASS
        notes = tuple(self.notes)
        if status is CheckStatus.PASS and self.inapplicable and not self.metrics:
            status = CheckStatus.NOT_APPLICABLE
            notes = notes if self.inapplicable in notes else (self.inapplicable, *notes)  # its reason, first
        return CheckResult(self.id, status, tuple(self.problems), notes, tuple(self.metrics), tuple(self.diagnoses))
