"""`python -m mutants triage`: the triage file against the last mutmut run, and the commands that change it.

    python -m mutants triage [list]                      untriaged survivors and stale entries; exit 1 if any
    python -m mutants triage add NAME... --verdict equivalent|missing-check --why TEXT
                                                         triage these mutants of the last run (by mutmut's name,
                                                         `x_f__mutmut_3` or the full one), keyed by what they are
    python -m mutants triage refresh [--drop-stale]      rewrite every entry in the current format (function,
                                                         line, column, occurrence), each as the mutant it matches
                                                         in the last run; with --drop-stale, remove the stale ones

Each reads `reports/mutmut_results.json` (`--results PATH` for another) and edits the triage file of the run's
algorithm (mutants/equivalent.toml for PPO, mutants/equivalent_grpo.toml for GRPO). An entry is keyed by what its
mutant is: the function, the stripped source line, the 1-based column of the change in it, the replaced text and
its replacement, and `occurrence` where the same line text appears more than once in the function, so it follows
its mutant when lines are added or moved, and is stale only when no mutant of that description exists any more.
A stale entry is reported once, with what mutmut made at its line now. Comments between entries are kept.
Exit 0 fine, 1 problems found (listed), 2 usage error (one line).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from . import keys, scoring
from .model import MutantRecord, MutantStatus, MutmutResults, TriageEntry, TriageVerdict
from .mutmut_algorithms import ALGORITHMS, algorithm
from .project import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent


class UsageError(Exception):
    """A usage error of the triage command: said in one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, its errors in one line (exit 2)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


# ---------------------------------------------------------------- the triage file as text


def toml_string(text: str) -> str:
    """`text` as a TOML string: literal where it can be, multi-line literal for a text of several lines, else basic."""
    if "'" not in text and "\n" not in text and "\r" not in text and text.isprintable():
        return f"'{text}'"
    if "\n" in text and "'''" not in text and not text.endswith("'") and not text.startswith("\n") and "\r" not in text:
        if all(c.isprintable() or c in "\n\t" for c in text):
            return f"'''{text}'''"
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def format_entry(entry: TriageEntry) -> str:
    """One `[[mutant]]` table, keys in the file's order."""
    lines = ["[[mutant]]"]
    for key, value in entry.to_dict().items():
        if key == "name":
            continue  # mutmut's number is no key of the triage: not written
        if isinstance(value, int):
            lines.append(f"{key} = {value}")
        elif key in ("function", "verdict"):  # names: a basic string, as the file always wrote them
            lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
        else:
            lines.append(f"{key} = {toml_string(value)}")
    return "\n".join(lines) + "\n"


def split_blocks(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the text before the first entry, [(an entry's `[[mutant]]` table, the comments and blank lines after it)])."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == "[[mutant]]"]
    if not starts:
        return text, []
    blocks = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        cut = end
        while cut > start + 1 and (not lines[cut - 1].strip() or lines[cut - 1].lstrip().startswith("#")):
            cut -= 1
        blocks.append(("".join(lines[start:cut]), "".join(lines[cut:end])))
    return "".join(lines[: starts[0]]), blocks


def rewrite(path: Path, entries: list[TriageEntry | None], added: list[TriageEntry] = ()) -> None:
    """Write the triage file with its entries replaced by `entries` (in order; None drops one) and `added` at the
    end; the header and the comments between entries stay."""
    header, blocks = split_blocks(path.read_text(encoding="utf-8") if path.is_file() else "")
    if len(blocks) != len(entries):
        raise RuntimeError(f"{path.name}: {len(blocks)} [[mutant]] tables but {len(entries)} entries")
    out = [header]
    for (_, trailing), entry in zip(blocks, entries):
        if entry is not None:
            out.append(format_entry(entry))
        out.append(trailing)
    if added:
        so_far = "".join(out)
        if so_far and not so_far.endswith("\n\n"):
            out.append("\n" if so_far.endswith("\n") else "\n\n")
        out.append("\n".join(format_entry(e) for e in added))
    text = "".join(out)
    tomllib.loads(text)  # never write a file that does not read back
    path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- against the last run


def load_results(path: Path) -> MutmutResults:
    """The last mutmut run's records, each with its column and occurrence (keys.describe)."""
    if not path.is_file():
        raise UsageError(f"no mutmut results at {path}: run `python -m mutants mutmut` first")
    try:
        results = MutmutResults.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # JSONDecodeError is a ValueError
        raise UsageError(
            f"{path} is not a mutmut run's results ({type(error).__name__}: {error}): pass the "
            "mutmut_results.json that `python -m mutants mutmut` writes, not mutation.json or another file"
        ) from None
    described = keys.describe(results.mutants, results.sources or {results.file: results.source})
    return dataclasses.replace(results, mutants=described)


def triage_path(results: MutmutResults, wanted: str | None) -> Path:
    """The triage file of the run's algorithm (a usage error when `--algorithm` names another)."""
    if wanted and wanted != results.algorithm:
        raise UsageError(f"the last mutmut run was over {results.algorithm}, not {wanted}: rerun it or pass --results")
    return HERE / algorithm(results.algorithm).triage_file


def load_entries(path: Path) -> list[TriageEntry]:
    """The file's entries; a usage error when it has problems of form (they are listed by `list`)."""
    entries, problems = scoring.load_triage(path)
    if problems:
        raise UsageError(f"{path.name} has problems of form, fix them first: {problems[0]}")
    return entries


def in_scope(entry: TriageEntry, results: MutmutResults) -> bool:
    """Whether the run looked at the entry's function (all of them, unless it was a `--functions` run)."""
    return not results.selected or entry.function in results.selected


def legacy_match(entry: TriageEntry, records, by_name: dict[str, MutantRecord]) -> MutantRecord | None:
    """The one mutant an entry describes, occurrence and column aside where the entry has none (the old format):
    the only candidate, else the one mutmut's `name` of the entry still names."""
    same = [
        r
        for r in records
        if (r.function, r.line, r.original, r.replacement)
        == (entry.function, entry.line, entry.original, entry.replacement)
        and (entry.occurrence is None or entry.occurrence == r.occurrence)
        and (entry.column is None or entry.column == r.column)
    ]
    if len(same) == 1:
        return same[0]
    named = by_name.get(entry.name)
    return named if named in same else None


def list_command(results: MutmutResults, path: Path) -> int:
    """Untriaged survivors and stale entries (each once), then the notes; exit 1 if any problem."""
    entries, problems = scoring.load_triage(path)
    _, more, notes = scoring.triage(results.mutants, entries, results.selected, path.name)
    problems += more
    scope = f"the functions {', '.join(results.selected)}" if results.selected else "the whole files"
    judged = sum(1 for r in results.mutants if not r.status.unjudged and r.status is not MutantStatus.NOT_CHECKED)
    print(f"{path.name}: {len(entries)} entries against {len(results.mutants)} mutants of {scope} "
          f"({results.algorithm}, {judged} judged)")
    for p in problems:
        print(f"PROBLEM {p}")
    for n in notes:
        print(f"note: {n}")
    if not problems:
        print("every survivor is triaged and every entry describes a mutant of the run")
    return 1 if problems else 0


def add_command(results: MutmutResults, path: Path, names: list[str], verdict: str, why: str) -> int:
    """Triage the named mutants of the last run (keyed by what they are), appended to the file."""
    if not why.strip():
        raise UsageError("--why must say why (equivalent: why no run can tell it; missing-check: the check)")
    entries = load_entries(path)
    by_name = {r.name: r for r in results.mutants} | {r.short: r for r in results.mutants}
    added: list[TriageEntry] = []
    for name in names:
        r = by_name.get(name)
        if r is None:
            raise UsageError(f"{name} is no mutant of the last mutmut run ({len(results.mutants)} mutants)")
        if r.location.start is None or r.column is None:
            raise UsageError(f"{name} changes no text of its function: nothing to key an entry by")
        if not (r.status.undetected or r.status is MutantStatus.SKIPPED):
            raise UsageError(f"{name} is {r.status.text}, not a survivor: nothing to triage")
        entry = TriageEntry(
            r.function, r.line, r.column, r.original, r.replacement, TriageVerdict(verdict), why.strip(), r.occurrence
        )
        taken = next((e for e in [*entries, *added] if e.matches(r)), None)
        if taken is not None:
            raise UsageError(f"{name} is already triaged: {taken.describe()}")
        added.append(entry)
    rewrite(path, list(entries), added)
    for e in added:
        print(f"added to {path.name}: {e.describe()}")
    return 0


def refresh_command(results: MutmutResults, path: Path, drop_stale: bool) -> int:
    """Every entry in the current format, keyed as the mutant it matches in the last run; stale ones reported
    (or dropped); exit 1 if stale entries are left."""
    entries = load_entries(path)
    by_name = {r.name: r for r in results.mutants}
    out: list[TriageEntry | None] = []
    stale, rekeyed, dropped = [], 0, 0
    for entry in entries:
        if not in_scope(entry, results):
            out.append(entry)
            continue
        matched = [r for r in results.mutants if entry.matches(r)]
        record = matched[0] if len(matched) == 1 else legacy_match(entry, results.mutants, by_name)
        if record is None:
            if drop_stale:
                dropped += 1
                print(f"dropped stale entry: {entry.describe()}")
                out.append(None)
            else:
                stale.append(entry)
                out.append(entry)
            continue
        new = TriageEntry(
            record.function,
            record.line,
            record.column,
            record.original,
            record.replacement,
            entry.verdict,
            entry.why,
            record.occurrence,
        )
        rekeyed += new.key != entry.key or bool(entry.name)
        out.append(new)
    rewrite(path, out)
    print(f"{path.name}: {len(entries)} entries, {rekeyed} rewritten in the current format, {dropped} dropped, "
          f"{len(stale)} stale")
    for entry in stale:
        print(f"PROBLEM stale entry: {entry.describe()}: {scoring.now_there(entry, results.mutants)}")
    return 1 if stale else 0


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line of `python -m mutants triage`."""
    parser = OneLineParser(
        prog="python -m mutants triage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--results", type=Path, default=ROOT / "reports" / "mutmut_results.json", help="the mutmut run's results"
    )
    parser.add_argument("--algorithm", choices=list(ALGORITHMS), default=None, help="check the run was over this one")
    sub = parser.add_subparsers(dest="action", parser_class=OneLineParser)
    sub.add_parser("list", help="untriaged survivors and stale entries (the default)")
    add = sub.add_parser("add", help="triage mutants of the last run")
    add.add_argument("names", nargs="+", metavar="NAME", help="mutmut's names (x_f__mutmut_3, or the full one)")
    add.add_argument("--verdict", required=True, choices=[v.value for v in TriageVerdict],
                     help="equivalent (no input tells it apart) or missing-check (a check the gate should add)")
    add.add_argument("--why", required=True, help="why it is equivalent, or the check that would close it")
    refresh = sub.add_parser("refresh", help="rewrite the entries in the current format, as the last run has them")
    refresh.add_argument("--drop-stale", action="store_true", help="remove entries that describe no mutant")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run one triage command; 0 fine, 1 problems found, 2 usage error (one line on stderr)."""
    try:
        args = parse(argv)
        results = load_results(args.results)
        path = triage_path(results, args.algorithm)
        if args.action == "add":
            return add_command(results, path, args.names, args.verdict, args.why)
        if args.action == "refresh":
            return refresh_command(results, path, args.drop_stale)
        return list_command(results, path)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
