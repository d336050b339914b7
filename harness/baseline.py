"""Known failures: a baseline file names the checks the gate knows fail on a target, and how each fails.

The file is TOML, one `[[known]]` table per check::

    # what the gate knows fails on this trainer; a new failure still fails the run
    [[known]]
    check = "extremes"
    reason = "the extreme is the mean of the micro-batches' maxima (class 18)"
    link = "https://github.com/OWNER/trainer/issues/..."     # optional
    [known.metrics]                                          # each failing metric's diagnoses
    entropy = [16]
    "<metric> @ <where>" = [18]                              # one comparison of a metric

and optionally `diagnoses` (the check's own), `problems` (how many of its problems are no metric's) and
`raises = true` (the trainer raises there): harness/baseline_pins.py. An entry with none of them is the
check-level form (files written before the metrics were pinned): it pins no metric and holds any failure
of its check, as it always did.

`load` reads it and validates it against an algorithm's check ids (a HarnessConfigError of one
line naming the file and the entry for the first thing wrong). `outcome` is what an entry makes
of its check's result: a failed check is `known` (it does not fail the run) when it fails as its
entry pins, else `changed` (`changes` says how); a passed check is `stale` (it fails the run: the
entry is to be removed); an errored check is `changed` (an error is never known); a skipped check
is neither, and so is a check that did not run. Writing a baseline from a run's failed checks is
the report's (harness/report/baseline_file.py).
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.baseline_pins import KEYS as PIN_KEYS
from harness.baseline_pins import Pins, changes, parse_pins
from harness.errors import HarnessConfigError
from harness.verdict import CheckResult, CheckStatus

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest, which runs the gate, brings tomli there
    import tomli as tomllib

KEYS = ("check", "reason", "link", *PIN_KEYS)
"""The keys of an entry; all but `check` and `reason` are optional."""
KNOWN = "known"
STALE = "stale"
CHANGED = "changed"
ERRORED = "it errored: an error is never a known failure"


@dataclass(frozen=True)
class Entry:
    """One known failure: the check's id, why it fails, optionally where that is tracked, and how it fails (`pins`;
    None for the check-level form, which holds any failure of the check)."""

    check: str
    reason: str
    link: str | None = None
    pins: Pins | None = None


@dataclass(frozen=True)
class Baseline:
    """The entries of a baseline file, in the file's order."""

    path: str
    entries: tuple[Entry, ...] = ()

    def entry(self, check_id: str) -> Entry | None:
        """The entry of `check_id`, or None when the baseline does not list it."""
        return next((e for e in self.entries if e.check == check_id), None)

    def not_run(self, ran: list[str]) -> list[str]:
        """The listed check ids that are not among `ran`, in the file's order."""
        return [e.check for e in self.entries if e.check not in ran]

    def unpinned(self) -> list[str]:
        """The checks of the entries in the check-level form (no metric pinned), in the file's order."""
        return [e.check for e in self.entries if e.pins is None]


def why_not_known(entry: Entry | None, result: CheckResult) -> list[str]:
    """Why a listed check that failed or errored is not a known failure, one line each ([] when it is known, or
    passed, or is not listed)."""
    if entry is None:
        return []
    if result.status is CheckStatus.ERROR:
        return [ERRORED]
    if result.status is not CheckStatus.FAIL or entry.pins is None:
        return []
    return changes(entry.pins, result)


def outcome(entry: Entry | None, result: CheckResult) -> str | None:
    """`known` for a listed check that failed as its entry pins, `changed` for one that failed otherwise or errored,
    `stale` for a passed one, else None."""
    if entry is None:
        return None
    if result.status is CheckStatus.PASS:
        return STALE
    if result.status in (CheckStatus.FAIL, CheckStatus.ERROR):
        return CHANGED if why_not_known(entry, result) else KNOWN
    return None


def load(path: str | os.PathLike[str], algorithm: str, target: str | None = None) -> Baseline:
    """The baseline in `path`, every entry a check of `algorithm`; HarnessConfigError (one line) otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        said = exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(exc)
        raise HarnessConfigError(f"baseline {path}: cannot read it ({said})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarnessConfigError(f"baseline {path}: not TOML: {one_line(exc)}") from None
    return Baseline(str(path), parse(data, str(path), algorithm, target))


def parse(data: dict[str, Any], path: str, algorithm: str, target: str | None = None) -> tuple[Entry, ...]:
    """The entries of a baseline file's parsed TOML, validated as `load` says."""
    from harness.algorithms import check_ids

    extra = sorted(set(data) - {"known"})
    if extra:
        raise HarnessConfigError(f"baseline {path}: unknown top-level key(s) {', '.join(extra)}; expected [[known]]")
    tables = data.get("known", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise HarnessConfigError(f"baseline {path}: `known` must be an array of tables: write each entry as [[known]]")
    ids = check_ids(algorithm)
    seen: dict[str, int] = {}
    entries = []
    for number, table in enumerate(tables, start=1):
        where = f"baseline {path}: entry {number}"
        if isinstance(table.get("check"), str):
            where += f" (check = {json.dumps(table['check'])})"
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise HarnessConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; an entry has {', '.join(KEYS)}")
        for key in ("check", "reason"):
            if key not in table:
                raise HarnessConfigError(f"{where}: missing `{key}`")
        for key in ("check", "reason", "link"):
            if key in table and not (isinstance(table[key], str) and table[key].strip()):
                raise HarnessConfigError(f"{where}: `{key}` must be a non-empty string")
        check = table["check"]
        if check in seen:
            raise HarnessConfigError(f"{where}: check {json.dumps(check)} is already entry {seen[check]}")
        if check not in ids:
            near = difflib.get_close_matches(check, list(ids), n=1)
            hint = f" (did you mean {json.dumps(near[0])}?)" if near else ""
            lister = f"python -m harness checks --target {target}" if target else "python -m harness checks"
            raise HarnessConfigError(
                f"{where}: {algorithm} has no check {json.dumps(check)}{hint}; `{lister}` lists them"
            )
        seen[check] = number
        entries.append(Entry(check, table["reason"], table.get("link"), parse_pins(table, where)))
    return tuple(entries)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__
