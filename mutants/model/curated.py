"""The curated runner's records: its verdict on a run, each mutant's result, the controls, curated.json.

The runner writes curated.json from a CuratedRun (`to_dict`); the report reads it
back into one (`from_dict`), each result referencing its catalogue mutant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import catalogue
from ..catalogue import Mutant, NotApplicable
from .status import CuratedStatus


@dataclass(frozen=True)
class Judgement:
    """The verdict on one mutant's run (runner.judge): its status, the named checks that failed, and why."""

    status: CuratedStatus
    named_failed: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class ControlResult:
    """The unmodified copy under one command (the full suite, or the two-process run): it must pass."""

    passed: bool
    seconds: float
    checks: int
    reason: str = ""

    def to_dict(self) -> dict:
        """The control as curated.json stores it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ControlResult:
        """A control read back from curated.json; a missing one reads as not passed."""
        return cls(bool(data.get("passed")), data.get("seconds", 0), data.get("checks", 0), data.get("reason", ""))


@dataclass(frozen=True)
class CuratedResult:
    """The verdict on one curated mutant, with the catalogue mutant it is about."""

    mutant: Mutant
    status: CuratedStatus
    failed_checks: tuple[str, ...] = ()
    named_failed: tuple[str, ...] = ()
    selection: str = ""
    seconds: float = 0.0
    reason: str = ""
    diff: str = ""
    diagnosed_classes: tuple[int, ...] = ()
    """The bug classes the gate's diagnoses of the run's failing metrics name most often, in order (several where
    they tie, as one combined diagnosis names them; (): no diagnosis)."""

    @property
    def diagnosed(self) -> str:
        """The diagnosed classes as the reports show them: `16`, `50+51`, or `-` for none."""
        return "+".join(map(str, self.diagnosed_classes)) or "-"

    @property
    def own_class_named(self) -> bool:
        """True when the mutant's own class is among the classes the gate named most often."""
        return self.mutant.bug_class in self.diagnosed_classes

    @property
    def misdiagnosed(self) -> bool:
        """True when the gate named classes, and not the mutant's own among them."""
        return bool(self.diagnosed_classes) and not self.own_class_named

    @property
    def id(self) -> str:
        """The catalogue id, by which the reports name the mutant."""
        return self.mutant.id

    @property
    def passed(self) -> bool:
        """Whether this result lets the session pass."""
        return self.status.passes

    @property
    def status_line(self) -> str:
        """The status and the first line of its reason, as a problem or mutation.json's statusReason says it."""
        return self.status.text + (f": {self.reason.splitlines()[0]}" if self.reason else "")

    def to_dict(self) -> dict:
        """The result as curated.json stores it: the mutant's metadata flat beside the verdict."""
        m = self.mutant
        return {
            "id": m.id,
            "bug_class": m.bug_class,
            "title": m.title,
            "source": m.source,
            "killed_by": list(m.killed_by),
            "status": self.status.text,
            "failed_checks": list(self.failed_checks),
            "named_failed": list(self.named_failed),
            "selection": self.selection,
            "seconds": self.seconds,
            "reason": self.reason,
            "diff": self.diff,
            "command": m.command,
            "diagnosed_classes": list(self.diagnosed_classes),
        }

    @classmethod
    def from_dict(cls, data: dict) -> CuratedResult:
        """A result read back from curated.json, about the catalogue's mutant of that id.

        The metadata the file recorded wins over the catalogue's (the report shows the
        run that was made); an id the catalogue no longer has gets a mutant without a
        patch, which the report then cannot place in the trainer's source.
        """
        recorded = {
            "id": data["id"],
            "bug_class": data["bug_class"],
            "title": data["title"],
            "source": data["source"],
            "killed_by": tuple(data["killed_by"]),
            "command": data.get("command", "verify"),
        }
        known = next((m for m in catalogue.MUTANTS if m.id == data["id"]), None)
        mutant = dataclasses.replace(known, **recorded) if known else Mutant(patch=(), **recorded)
        return cls(
            mutant,
            CuratedStatus(data["status"]),
            tuple(data.get("failed_checks", ())),
            tuple(data.get("named_failed", ())),
            data.get("selection", ""),
            data.get("seconds", 0),
            data.get("reason", ""),
            data.get("diff", ""),
            _diagnosed(data),
        )


def _diagnosed(data: dict) -> tuple[int, ...]:
    """A result's diagnosed classes as curated.json holds them; a file written before they were kept as a list
    holds one `diagnosed_class` (null for none)."""
    if "diagnosed_classes" in data:
        return tuple(data["diagnosed_classes"])
    one = data.get("diagnosed_class")
    return () if one is None else (one,)


@dataclass(frozen=True)
class CuratedRun:
    """curated.json: the controls, the settings and every mutant's result."""

    controls: dict[str, ControlResult]
    mutants: tuple[CuratedResult, ...]
    full: bool = False
    jobs: int | None = None
    wall_seconds: float = 0.0
    finished: str | None = None
    not_applicable: tuple[NotApplicable, ...] = ()

    def to_dict(self) -> dict:
        """The run as curated.json stores it (`control` is the default algorithm's whole gate, kept for older
        readers, where the run has it: a selection of another algorithm's mutants runs that algorithm's)."""
        return {
            **({"control": self.controls["verify"].to_dict()} if "verify" in self.controls else {}),
            "controls": {command: c.to_dict() for command, c in self.controls.items()},
            "full": self.full,
            "jobs": self.jobs,
            "wall_seconds": self.wall_seconds,
            "finished": self.finished,
            "mutants": [r.to_dict() for r in self.mutants],
            "not_applicable": [dataclasses.asdict(n) for n in self.not_applicable],
        }

    @classmethod
    def from_dict(cls, data: dict) -> CuratedRun:
        """A run read back from curated.json; a file with only `control` has that one control."""
        controls = data.get("controls") or {"verify": data.get("control", {})}
        return cls(
            {command: ControlResult.from_dict(c) for command, c in controls.items()},
            tuple(CuratedResult.from_dict(r) for r in data["mutants"]),
            data.get("full", False),
            data.get("jobs"),
            data.get("wall_seconds", 0),
            data.get("finished"),
            tuple(NotApplicable(**n) for n in data.get("not_applicable", ())),
        )
