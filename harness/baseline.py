"""Known failures: a baseline file names the checks the gate knows fail on a target.

The file is TOML, one `[[known]]` table per check::

    # what the gate knows fails on this trainer; a new failure still fails the run
    [[known]]
    check = "extremes"
    reason = "clip_ratio/high_max is the mean of the micro-batches' maxima (class 18)"
    link = "https://github.com/huggingface/trl/issues/..."   # optional

`load` reads it and validates it against an algorithm's check ids (a HarnessConfigError of one
line naming the file and the entry for the first thing wrong). `outcome` is what an entry makes
of its check's result: a failed check is `known` (it does not fail the run), a passed check is
`stale` (it fails the run: the entry is to be removed); an errored or skipped check is neither,
and so is a check that did not run. Writing a baseline from a run's failed checks is the report's
(harness/report/baseline_file.py).
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessConfigError
from harness.verdict import CheckStatus

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest, which runs the gate, brings tomli there
    import tomli as tomllib

KEYS = ("check", "reason", "link")
"""The keys of an entry; `link` is optional."""
KNOWN = "known"
STALE = "stale"


@dataclass(frozen=True)
class Entry:
    """One known failure: the check's id, why it fails, and optionally where that is tracked."""

    check: str
    reason: str
    link: str | None = None


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


def outcome(entry: Entry | None, status: CheckStatus) -> str | None:
    """`known` for a failed check with an entry, `stale` for a passed one, else None."""
    if entry is None:
        return None
    if status is CheckStatus.FAIL:
        return KNOWN
    if status is CheckStatus.PASS:
        return STALE
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
        for key in KEYS:
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
        entries.append(Entry(check, table["reason"], table.get("link")))
    return tuple(entries)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__
