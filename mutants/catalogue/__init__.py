"""The curated catalogue: one mutant per bug class of docs/bug-catalogue.md, of every algorithm that declares one.

Each mutant re-creates, inside a reference trainer, a bug that shipped (or was found in
review) in a public RL trainer, and names the checks of the gate that must kill it.
The catalogue is data, in the folder each registered algorithm declares as its
`mutation.catalogue` (harness.algorithms; PPO and GRPO share mutants/catalogue):
`classes.toml` is the table of bug classes (number, algorithm, short name), and
`entries/` holds one `<id>.toml` per mutant (its metadata) with its patch beside it as
`<id>.diff`, a unified diff against the trainer files with paths relative to the
repository root (load.py reads them): a PPO mutant patches `reference_trainers/ppo.py`,
a GRPO mutant `reference_trainers/grpo.py`, or either `common.py` for a bug in what both
trainers share (sampling, log-probs, logits, scores, the KL estimate).
Each hunk's old text, context included, must occur exactly once in its file, so
that a refactor of the trainer breaks the catalogue loudly instead of leaving a
mutant that no longer mutates anything (see `apply`).

A mutant's id is its algorithm's `mutation.id_prefix` (`c` for PPO, `g` for GRPO), two
digits of its bug class, and words. `killed_by` lists check ids of `verify.json` (e.g.
"uneven_split[epochs=1]") or scenario names (e.g. "uneven_split", which covers both epoch
variants) of its algorithm's gate, run against that algorithm's default target. The runner
counts a mutant as killed only when the verify run exits 1 and at least one of these checks
failed. Nothing here names an algorithm: each is read from the registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.algorithms import DEFAULT_ALGORITHM, Mutation, get, known_algorithms

from ..project import ROOT
from . import load
from .patches import PatchError, Replacement, apply_to_text

DECLARED: dict[str, Mutation] = {
    name: get(name).mutation for name in known_algorithms() if get(name).mutation is not None
}  # fmt: skip
"""Each registered algorithm that declares a `mutation`, by name, in the registry's order."""
TRAINER = DECLARED[DEFAULT_ALGORITHM].files[0]
"""The default algorithm's trainer (the first of its mutated files)."""
TARGETS = {name: get(name).default_target for name in known_algorithms()}
"""The target each algorithm's mutants are verified against (`python -m harness verify --target ...`)."""
ID_PREFIX = {name: mutation.id_prefix for name, mutation in DECLARED.items()}
"""The first letters of a mutant id, by algorithm; two digits of its bug class follow."""


def _folders() -> dict[Path, tuple[str, ...]]:
    """Each catalogue folder (resolved against the repository root) -> the algorithms that declare it, in order."""
    out: dict[Path, tuple[str, ...]] = {}
    for name, mutation in DECLARED.items():
        folder = (ROOT / mutation.catalogue).resolve()
        out[folder] = (*out.get(folder, ()), name)
    return out


FOLDERS = _folders()
"""Catalogue folder -> the algorithms whose mutants it holds."""


def _checks(algorithm: str = DEFAULT_ALGORITHM) -> dict[str, tuple[str, str]]:
    """Check id of verify.json -> (scenario name, pytest node name of the test that records it).

    Generated from the gate's own scenarios (`harness.algorithms`), never typed here.
    """
    from harness.algorithms import check_ids

    return {cid: (scenario, f"test_check[{cid}]") for cid, scenario in check_ids(algorithm).items()}


CHECKS: dict[str, tuple[str, str]] = _checks()
"""The default algorithm's checks (the default run's)."""
ALGORITHM_CHECKS: dict[str, dict[str, tuple[str, str]]] = {name: _checks(name) for name in TARGETS}
"""Each algorithm's checks: algorithms may reuse a scenario name (freshness, all_masked), so they are kept apart."""
# killed_by entry that stands for "any check of the two-process run" (`python -m harness verify-dist`)
VERIFY_DIST = "verify_dist"


@dataclass(frozen=True)
class Mutant:
    """One curated mutant: metadata plus the patch that re-creates the bug."""

    id: str
    bug_class: int
    title: str
    source: str
    killed_by: tuple[str, ...]
    patch: tuple[Replacement, ...]
    command: str = "verify"
    """`verify` (the verify suite) or `verify-dist` (the two-process run)."""
    notes: str = ""
    algorithm: str = DEFAULT_ALGORITHM
    """Whose gate kills it: its checks are that algorithm's, run against `TARGETS[algorithm]`."""
    raises: bool = False
    """Whether its bug is the trainer raising: only then does a check that failed because the trainer raised count
    as its kill (otherwise the diff no longer expresses the bug, and the run is an error)."""

    @property
    def target(self) -> str:
        """The built-in target the mutant's verify run names."""
        return TARGETS[self.algorithm]


@dataclass(frozen=True)
class NotApplicable:
    """A bug class that cannot arise in the reference trainer, with the reason."""

    bug_class: int
    reason: str


def _read_catalogue() -> tuple[tuple[load.BugClass, ...], list[dict], list[str]]:
    """The bug classes and the mutants' fields of every catalogue folder, in the order of FOLDERS, and the problems
    found: besides each file's own, a class numbered in an earlier folder, and a mutant kept in the folder of an
    algorithm that is not its own."""
    classes: list[load.BugClass] = []
    entries: list[dict] = []
    problems: list[str] = []
    for folder, names in FOLDERS.items():
        found, wrong = load.read_classes(folder / load.CLASSES, names)
        taken = sorted({c.number for c in found} & {c.number for c in classes})
        if taken:
            problems.append(f"{folder / load.CLASSES}: bug classes {taken} are numbered in another catalogue folder")
        classes += found
        problems += wrong
        fields, wrong = load.read_entries(folder / load.ENTRIES)
        problems += wrong
        problems += [
            f"{f['id']}: its algorithm {f['algorithm']!r} does not keep its mutants in {folder}"
            for f in fields
            if f["algorithm"] not in names
        ]
        entries += fields
    return tuple(classes), entries, problems


CLASSES, _ENTRIES, _LOAD_PROBLEMS = _read_catalogue()
"""The rows of every catalogue folder's classes.toml, in order."""
CLASSES_OF = {name: tuple(c.number for c in CLASSES if c.algorithm == name) for name in DECLARED}
"""Each algorithm's classes of docs/bug-catalogue.md: each needs a mutant of that algorithm or a reason."""
NOT_APPLICABLE = tuple(NotApplicable(c.number, c.not_applicable) for c in CLASSES if c.not_applicable)
"""The classes that give a reason in classes.toml instead of needing a mutant."""
MUTANTS: tuple[Mutant, ...] = tuple(Mutant(**fields) for fields in _ENTRIES)
"""Every mutant of every catalogue folder, in the order of their ids within a folder."""


def by_id(ids: list[str] | tuple[str, ...] | None = None) -> list[Mutant]:
    """The mutants named by `ids` (all when empty); an unknown id is an error."""
    if not ids:
        return list(MUTANTS)
    known = {m.id: m for m in MUTANTS}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise KeyError(f"unknown mutant id(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[i] for i in ids]


def named_checks(mutant: Mutant) -> list[str]:
    """The check ids of verify.json that `mutant.killed_by` names (scenario names expanded), in its algorithm."""
    wanted = set(mutant.killed_by)
    checks = ALGORITHM_CHECKS[mutant.algorithm]
    return [cid for cid, (scenario, _) in checks.items() if cid in wanted or scenario in wanted]


def test_selection(mutant: Mutant) -> list[str]:
    """The check ids to run for `mutant` (`python -m harness verify --check ID ...`)."""
    return named_checks(mutant)


def patched(mutant: Mutant, root: Path) -> dict[Path, tuple[str, str]]:
    """{file: (text before, text after)} of `mutant`'s patch against the project under `root`.

    Raises PatchError when a hunk's old text does not occur exactly once, or when the
    patched file no longer compiles. Nothing is written.
    """
    texts: dict[Path, tuple[str, str]] = {}
    for file in dict.fromkeys(rep.file for rep in mutant.patch):
        path = root / file
        if not path.is_file():
            raise PatchError(f"{mutant.id}: {file} does not exist under {root}")
        before = path.read_text(encoding="utf-8")
        after = apply_to_text(before, [rep for rep in mutant.patch if rep.file == file], mutant.id)
        try:
            compile(after, str(path), "exec")
        except SyntaxError as exc:
            raise PatchError(f"{mutant.id}: the patched {path.name} does not compile: {exc}") from None
        texts[path] = (before, after)
    return texts


def apply(mutant: Mutant, root: Path) -> list[Path]:
    """Apply `mutant`'s patch to the project copy under `root`; returns the files changed."""
    texts = patched(mutant, root)
    for path, (_, after) in texts.items():
        path.write_text(after, encoding="utf-8")
    return list(texts)


def diff(mutant: Mutant, root: Path) -> str:
    """A unified diff (with the file's own line numbers) of `mutant`'s patch against the project under `root`."""
    import difflib

    out: list[str] = []
    for path, (before, after) in patched(mutant, root).items():
        name = path.relative_to(root).as_posix()
        out.extend(
            difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}", n=1
            )
        )
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def _mutant_problems(m: Mutant, classes: dict[int, load.BugClass]) -> list[str]:
    """What is wrong with one mutant's metadata."""
    if m.algorithm not in ALGORITHM_CHECKS or m.algorithm not in ID_PREFIX:
        return [f"{m.id}: unknown algorithm {m.algorithm!r}"]
    problems = []
    checks = ALGORITHM_CHECKS[m.algorithm]
    scenarios = {scenario for scenario, _ in checks.values()}
    if m.bug_class not in classes:
        problems.append(f"{m.id}: bug class {m.bug_class} is not in classes.toml")
    if not re.fullmatch(rf"{ID_PREFIX[m.algorithm]}{m.bug_class:02d}_[a-z0-9_]+", m.id):
        problems.append(f"{m.id}: the id must be {ID_PREFIX[m.algorithm]}{m.bug_class:02d}_<words>")
    for name in ("title", "source"):
        if not getattr(m, name).strip():
            problems.append(f"{m.id}: empty {name}")
    if not m.patch:
        problems.append(f"{m.id}: empty patch")
    if not m.killed_by:
        problems.append(f"{m.id}: killed_by is empty")
    for check in m.killed_by:
        if check != VERIFY_DIST and check not in checks and check not in scenarios:
            problems.append(f"{m.id}: killed_by names unknown check {check!r}")
    if m.command not in load.COMMANDS:
        problems.append(f"{m.id}: unknown command {m.command!r}")
    if m.command == "verify" and not named_checks(m):
        problems.append(f"{m.id}: names no check of the verify suite")
    if "://" in m.source:
        problems.append(f"{m.id}: source must be a URL-free reference")
    return problems


def _shared_prefixes() -> list[str]:
    """Each mutant id prefix that two algorithms declare."""
    problems = []
    for prefix in dict.fromkeys(ID_PREFIX.values()):
        sharing = [name for name, p in ID_PREFIX.items() if p == prefix]
        if len(sharing) > 1:
            problems.append(f"algorithms {', '.join(sharing)} share the mutant id prefix {prefix!r}")
    return problems


def check_metadata() -> list[str]:
    """Problems with the catalogue's files and metadata (empty when it is complete)."""
    problems = [*_LOAD_PROBLEMS, *_shared_prefixes()]
    classes = {c.number: c for c in CLASSES}
    for algorithm, numbers in CLASSES_OF.items():
        covered = {m.bug_class for m in MUTANTS if m.algorithm == algorithm}
        missing = sorted(set(numbers) - covered - {n.bug_class for n in NOT_APPLICABLE})
        if missing:
            problems.append(f"{algorithm} bug classes without a mutant of that algorithm or a reason: {missing}")
    seen_ids: set[str] = set()
    for m in MUTANTS:
        if m.id in seen_ids:
            problems.append(f"duplicate id {m.id}")
        seen_ids.add(m.id)
        problems += _mutant_problems(m, classes)
    return problems
