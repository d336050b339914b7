"""Reading a catalogue folder's files: the bug classes (classes.toml) and one TOML and one diff per mutant (entries/).

Nothing here raises on a malformed file: each reader returns what it could read and
the problems it found, which `check_metadata` reports and the runner refuses to run with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .patches import PatchError, read_diff

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest, which runs the gate, brings tomli there
    import tomli as tomllib

CLASSES = "classes.toml"
"""The file of a catalogue folder that lists its bug classes."""
ENTRIES = "entries"
"""The folder of a catalogue folder that holds its mutants."""
COMMANDS = ("verify", "verify-dist")

ENTRY_FIELDS: dict[str, type] = {
    "id": str,
    "bug_class": int,
    "algorithm": str,
    "command": str,
    "title": str,
    "source": str,
    "killed_by": list,
    "notes": str,
    "raises": bool,
}
"""Each key of a mutant's TOML file and its type; `notes` and `raises` may be left out."""
OPTIONAL = {"notes": "", "raises": False}


@dataclass(frozen=True)
class BugClass:
    """One row of the classes table: its number, the algorithm its trainers are, a short name.

    `not_applicable` is the reason a class cannot arise in that algorithm's reference trainer
    (then it needs no mutant), or empty.
    """

    number: int
    algorithm: str
    name: str
    not_applicable: str = ""


def _toml(path: Path) -> tuple[dict, str]:
    """The TOML file at `path`, or ({}, why it cannot be read)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), ""
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return {}, f"{path.name}: {exc}"


def read_classes(path: Path, algorithms: Sequence[str]) -> tuple[tuple[BugClass, ...], list[str]]:
    """The bug classes of `path` in their order, and the problems with it; a class's algorithm must be one of
    `algorithms` (those whose catalogue folder holds `path`)."""
    data, problem = _toml(path)
    if problem:
        return (), [problem]
    classes, problems = [], []
    for row in data.get("classes", ()):
        keys = set(row) if isinstance(row, dict) else set()
        if not {"number", "algorithm", "name"} <= keys <= {"number", "algorithm", "name", "not_applicable"}:
            problems.append(f"{path.name}: a class needs number, algorithm, name (and may give not_applicable): {row}")
            continue
        c = BugClass(**row)
        if not isinstance(c.number, int) or c.algorithm not in algorithms or not str(c.name).strip():
            problems.append(f"{path.name}: class {c.number}: a number, an algorithm of {tuple(algorithms)} and a name")
            continue
        classes.append(c)
    numbers = [c.number for c in classes]
    if not classes:
        problems.append(f"{path.name}: no classes")
    elif len(set(numbers)) != len(numbers) or numbers != sorted(numbers):
        problems.append(f"{path.name}: the class numbers must be unique and in order: {numbers}")
    return tuple(classes), problems


def read_entry(toml_path: Path) -> tuple[dict | None, list[str]]:
    """The fields of one mutant (its patch read from the `.diff` beside it), or None; and the problems."""
    data, problem = _toml(toml_path)
    if problem:
        return None, [problem]
    name = toml_path.name
    problems = [f"{name}: unknown key {key!r}" for key in data if key not in ENTRY_FIELDS]
    for key, kind in ENTRY_FIELDS.items():
        if key not in data and key not in OPTIONAL:
            problems.append(f"{name}: no {key}")
        elif key in data and (not isinstance(data[key], kind) or (kind is not bool and isinstance(data[key], bool))):
            problems.append(f"{name}: {key} must be a {kind.__name__}")
    if problems:
        return None, problems
    fields = dict(OPTIONAL, **data)
    if fields["id"] != toml_path.stem:
        problems.append(f"{name}: its id is {fields['id']!r}; the file must be named after it")
    if not all(isinstance(k, str) for k in fields["killed_by"]):
        problems.append(f"{name}: killed_by must list strings")
    diff_path = toml_path.with_suffix(".diff")
    try:
        patch = read_diff(diff_path.read_text(encoding="utf-8"))
    except OSError:
        return None, [*problems, f"{name}: no {diff_path.name} beside it"]
    except PatchError as exc:
        return None, [*problems, f"{diff_path.name}: {exc}"]
    if not patch:
        problems.append(f"{diff_path.name}: no hunk")
    problems += [f"{diff_path.name}: a hunk that changes nothing" for rep in patch if rep.old == rep.new]
    if problems:
        return None, problems
    fields.update(killed_by=tuple(fields["killed_by"]), patch=patch)
    return fields, []


def read_entries(folder: Path) -> tuple[list[dict], list[str]]:
    """Every mutant's fields under `folder`, in the order of their file names; and the problems found."""
    entries, problems = [], []
    for toml_path in sorted(folder.glob("*.toml")):
        fields, found = read_entry(toml_path)
        problems += found
        if fields is not None:
            entries.append(fields)
    problems += [
        f"{diff.name}: no {diff.stem}.toml beside it"
        for diff in sorted(folder.glob("*.diff"))
        if not diff.with_suffix(".toml").is_file()
    ]
    return entries, problems
