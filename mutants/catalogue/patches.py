"""A curated mutant's patch: a unified diff read into exact replacements, and applied to a file's text.

A hunk is not placed by its line numbers: its old side (context lines included)
must occur exactly once in the file, or the patch no longer says where it goes
and `PatchError` reports that the catalogue has rotted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(RuntimeError):
    """A catalogue patch no longer matches the trainer (or cannot be read): the catalogue has rotted."""


@dataclass(frozen=True)
class Replacement:
    """Replace `old` with `new` in `file`, where `before + old + after` occurs exactly once.

    `before` and `after` are a hunk's unchanged context lines around its change; they stay as they are.
    """

    file: str
    old: str
    new: str
    before: str = ""
    after: str = ""

    @property
    def hunk_old(self) -> str:
        """The text that must occur exactly once in the file."""
        return self.before + self.old + self.after

    @property
    def hunk_new(self) -> str:
        """What that text becomes."""
        return self.before + self.new + self.after


def _path(line: str, prefix: str) -> str:
    """The file a `---`/`+++` line names, without its `a/`/`b/` and any timestamp after a tab."""
    name = line[len(prefix) :].rstrip("\n").split("\t")[0]
    return name[2:] if name[:2] in ("a/", "b/") else name


def _hunk(lines: list[str], at: int, file: str, old_count: int, new_count: int) -> tuple[Replacement, int]:
    """The hunk whose body starts at `lines[at]`, as a Replacement; and the index after it."""
    tags, old, new = [], [], []
    while old_count > 0 or new_count > 0:
        if at >= len(lines):
            raise PatchError(f"{file}: a hunk ends before its line counts say")
        line = lines[at]
        tag, body = (" ", "\n") if line == "\n" else (line[0], line[1:])  # an empty context line may lose its space
        if tag not in " -+" or (tag in " -" and old_count == 0) or (tag in " +" and new_count == 0):
            raise PatchError(f"{file}: unexpected line in a hunk: {line.rstrip()!r}")
        tags.append(tag)
        if tag in " -":
            old.append(body)
            old_count -= 1
        if tag in " +":
            new.append(body)
            new_count -= 1
        at += 1
        if at < len(lines) and lines[at].startswith("\\"):  # "\ No newline at end of file"
            for side in [old] if tag == "-" else [new] if tag == "+" else [old, new]:
                side[-1] = side[-1].removesuffix("\n")
            at += 1
    lead = next((i for i, t in enumerate(tags) if t != " "), len(tags))
    trail = next((i for i, t in enumerate(reversed(tags)) if t != " "), 0)
    n_old, n_new = len(old), len(new)
    rep = Replacement(
        file,
        "".join(old[lead : n_old - trail]),
        "".join(new[lead : n_new - trail]),
        "".join(old[:lead]),
        "".join(old[n_old - trail :]),
    )
    return rep, at


def read_diff(text: str) -> tuple[Replacement, ...]:
    """The replacements of a unified diff (`diff -u`, `git diff`), one per hunk, in the diff's order.

    Lines before a file's `---` line (`diff --git`, `index`) are skipped; hunk line numbers are not used.
    """
    lines = [part + "\n" for part in text.split("\n")]  # "\n" only: a trainer line may hold a form feed
    if not lines[-1].strip("\n"):
        lines.pop()
    replacements: list[Replacement] = []
    file = None
    at = 0
    while at < len(lines):
        line = lines[at]
        if line.startswith("--- ") and at + 1 < len(lines) and lines[at + 1].startswith("+++ "):
            file, target = _path(line, "--- "), _path(lines[at + 1], "+++ ")
            if file != target:
                raise PatchError(f"a diff from {file} to {target}: a mutant patches a file in place")
            at += 2
        elif line.startswith("@@"):
            match = HUNK.match(line)
            if match is None or file is None:
                raise PatchError(f"a hunk header without its file or unreadable: {line.rstrip()!r}")
            old_count, new_count = (1 if n is None else int(n) for n in match.group(2, 4))
            rep, at = _hunk(lines, at + 1, file, old_count, new_count)
            replacements.append(rep)
        elif file is None or line.startswith(("diff ", "index ")):
            at += 1
        else:
            raise PatchError(f"{file}: unexpected line between hunks: {line.rstrip()!r}")
    return tuple(replacements)


def occurrences(text: str, part: str) -> list[int]:
    """Every offset at which `part` starts in `text`, overlapping ones included."""
    found, at = [], text.find(part)
    while at >= 0 and part:
        found.append(at)
        at = text.find(part, at + 1)
    return found


def apply_to_text(text: str, replacements: list[Replacement], where: str) -> str:
    """`text` with each replacement made; each hunk must occur exactly once in `text`, the hunks in order."""
    out, done = [], 0
    for rep in replacements:
        found = occurrences(text, rep.hunk_old)
        if len(found) != 1:
            first = rep.hunk_old.strip().splitlines()[0] if rep.hunk_old.strip() else repr(rep.hunk_old)
            raise PatchError(
                f"{where}: expected the text to replace exactly once in {rep.file}, "
                f"found it {len(found)} time(s): {first!r}"
            )
        if found[0] < done:
            raise PatchError(f"{where}: the hunks of {rep.file} overlap or are out of order")
        out += [text[done : found[0]], rep.hunk_new]
        done = found[0] + len(rep.hunk_old)
    return "".join([*out, text[done:]])
