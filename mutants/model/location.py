"""Where a mutation is: a 1-based line and column, and a span of them, as mutation-testing-report-schema counts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Position:
    """A 1-based line and column in the trainer's source, as mutation-testing-report-schema counts them."""

    line: int
    column: int

    @classmethod
    def at(cls, text: str, offset: int, first_line: int = 1) -> Position:
        """The position of character `offset` of `text`, whose first line is line `first_line` of the file."""
        before = text[:offset]
        return cls(first_line + before.count("\n"), offset - (before.rfind("\n") + 1) + 1)

    def to_dict(self) -> dict:
        """The position as the schema (and mutmut_results.json) writes it."""
        return {"line": self.line, "column": self.column}

    @classmethod
    def from_dict(cls, data: dict) -> Position:
        """A position read back from JSON."""
        return cls(data["line"], data["column"])


@dataclass(frozen=True)
class Location:
    """Where a mutation is in the trainer's source, end exclusive; no ends where the mutant changed no text."""

    start: Position | None
    end: Position | None

    def to_dict(self) -> dict:
        """The location as the schema writes it (null ends where there are none)."""
        return {key: None if p is None else p.to_dict() for key, p in (("start", self.start), ("end", self.end))}

    @classmethod
    def from_dict(cls, data: dict) -> Location:
        """A location read back from JSON."""
        start, end = data.get("start"), data.get("end")
        return cls(
            None if start is None else Position.from_dict(start), None if end is None else Position.from_dict(end)
        )
