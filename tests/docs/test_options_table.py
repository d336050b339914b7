"""docs/options.md against the configs it describes: every field of TRL 1.16.0's `GRPOConfig` (its own and those it
inherits from `TrainingArguments`), of the reference `GRPOConfig` and of the reference `PPOConfig` has a row, every
option a row names is a field of that config, every check id a row names is one of the algorithm's checks, and every
row says what is compared or why nothing is.

TRL 1.16.0's fields are read in a subprocess whose `PYTHONPATH` starts with the folder that `nox -s tests` names in
PPO_HARNESS_TRL_NEWEST (this venv has TRL 1.12.0), or in this venv where 1.16.0 is the installed release (`nox -s
trl_newest`); elsewhere that test skips.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.algorithms import cases, get
from reference_trainers.grpo_config import GRPOConfig as ReferenceGRPOConfig
from reference_trainers.ppo_config import PPOConfig as ReferencePPOConfig

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = ROOT / "docs" / "options.md"
TRL_RELEASE = "1.16.0"
TRL_SECTION = f"TRL {TRL_RELEASE}'s `GRPOConfig`"
GRPO_SECTION = "The reference GRPO trainer's `GRPOConfig`"
PPO_SECTION = "The reference PPO trainer's `PPOConfig`"
COLUMNS = ("option", "what it changes", "values the gate runs", "checks that run it", "what is compared")
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
CHECK = re.compile(r"`([a-z_0-9]+(?:\[[^`\]]*\])?)`")
FIELDS = """
import dataclasses, json
from trl import GRPOConfig, __version__
print(json.dumps([__version__, [f.name for f in dataclasses.fields(GRPOConfig)]]))
"""


def section(text: str, heading: str) -> str:
    """The text under the '## ' `heading`, up to the next '## ' heading."""
    start = text.index(f"\n## {heading}\n")
    after = text.find("\n## ", start + 1)
    return text[start : after if after >= 0 else len(text)]


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def rows(heading: str) -> list[dict[str, str]]:
    """Every row of every table under `heading`, by column name (the header rows checked to be COLUMNS)."""
    text = section(OPTIONS.read_text(encoding="utf-8"), heading)
    lines = [line for line in text.splitlines() if line.startswith("|")]
    headers = [cells(line) for line in lines if line.startswith("| option |")]
    assert headers and all(tuple(h) == COLUMNS for h in headers), f"{heading}: tables must have the columns {COLUMNS}"
    body = [cells(line) for line in lines if not line.startswith(("| option |", "|---"))]
    assert body, f"{heading}: no row"
    bad = [row[0] for row in body if len(row) != len(COLUMNS)]
    assert not bad, f"{heading}: rows with other than {len(COLUMNS)} cells: {bad}"
    return [dict(zip(COLUMNS, row)) for row in body]


def named(table: list[dict[str, str]]) -> list[str]:
    """The options the table's rows name (a row may name several)."""
    return [name for row in table for name in NAME.findall(row["option"])]


def holds(table: list[dict[str, str]], fields: list[str], config: str) -> None:
    """Every field has a row, once; every option named is a field; every row says what is compared."""
    options = named(table)
    missing = [f for f in fields if f not in options]
    assert not missing, f"docs/options.md has no row for these options of {config}: {missing}"
    stray = sorted({o for o in options if o not in fields})
    assert not stray, f"docs/options.md names options that {config} does not have: {stray}"
    twice = sorted({o for o in options if options.count(o) > 1})
    assert not twice, f"docs/options.md has more than one row for these options of {config}: {twice}"
    empty = [row["option"] for row in table if not row["what is compared"] or not row["checks that run it"]]
    assert not empty, f"rows that say neither what is compared nor why nothing is: {empty}"


def check_ids(algorithm: str) -> tuple[set[str], set[str]]:
    """The algorithm's check ids (`verify-dist`'s on two processes included) and its scenario names."""
    ids = {str(case.id) for case in cases(algorithm)} | {str(i) for i in get(algorithm).rank_reads(2)}
    return ids, {case.scenario.name for case in cases(algorithm)}


def unknown_checks(table: list[dict[str, str]], algorithm: str) -> list[str]:
    """The check ids the table names that are no check of `algorithm` (`...` stands for any part of an id)."""
    ids, scenarios = check_ids(algorithm)
    out = []
    for row in table:
        for name in CHECK.findall(row["checks that run it"]):
            if "..." in name:
                pattern = re.compile(re.escape(name).replace(re.escape("..."), ".+"))
                known = any(pattern.fullmatch(i) for i in ids)
            else:
                known = name in ids or name in scenarios
            if not known:
                out.append(name)
    return out


def trl_fields() -> list[str] | None:
    """The field names of TRL 1.16.0's GRPOConfig, read in a subprocess, or None where that release is not here."""
    folder = os.environ.get("PPO_HARNESS_TRL_NEWEST")
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}
    if folder:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, env.get("PYTHONPATH", "")) if p)
    else:
        try:
            if importlib.metadata.version("trl") != TRL_RELEASE:
                return None
        except importlib.metadata.PackageNotFoundError:
            return None
    done = subprocess.run([sys.executable, "-c", FIELDS], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"reading TRL's GRPOConfig failed:\n{done.stderr[-2000:]}"
    version, fields = json.loads(done.stdout.strip().splitlines()[-1])
    if version != TRL_RELEASE:
        return None
    return fields


def test_every_option_of_trl_newest_grpoconfig_has_a_row():
    fields = trl_fields()
    if fields is None:
        pytest.skip(f"TRL {TRL_RELEASE} is not here: PPO_HARNESS_TRL_NEWEST names no folder with it (nox -s tests)")
    assert len(fields) > 150, f"TRL's GRPOConfig has only {len(fields)} fields: not the release this table is of"
    holds(rows(TRL_SECTION), fields, f"TRL {TRL_RELEASE}'s GRPOConfig")


def test_every_option_of_the_reference_grpo_config_has_a_row():
    holds(rows(GRPO_SECTION), [f.name for f in dataclasses.fields(ReferenceGRPOConfig)], "the reference GRPOConfig")


def test_every_option_of_the_reference_ppo_config_has_a_row():
    holds(rows(PPO_SECTION), [f.name for f in dataclasses.fields(ReferencePPOConfig)], "the reference PPOConfig")


TABLES = ((TRL_SECTION, "grpo"), (GRPO_SECTION, "grpo"), (PPO_SECTION, "ppo"))
"""Each table's heading, and the algorithm whose checks it names."""


@pytest.mark.parametrize(("heading", "algorithm"), TABLES)
def test_every_check_the_table_names_exists(heading, algorithm):
    table = rows(heading)
    assert any(CHECK.search(row["checks that run it"]) for row in table), f"{heading}: no row names a check"
    unknown = unknown_checks(table, algorithm)
    assert not unknown, f"docs/options.md, {heading}: no {algorithm} check has these ids: {unknown}"


def test_a_missing_row_or_an_unknown_check_is_named():
    """The helpers fail on what they exist to catch: a field without a row, an option that is no field, a check id
    that is none of the algorithm's."""
    table = rows(PPO_SECTION)
    fields = [f.name for f in dataclasses.fields(ReferencePPOConfig)]
    without_gamma = [row for row in table if "`gamma`" not in row["option"]]
    with pytest.raises(AssertionError, match="no row for these options.*gamma"):
        holds(without_gamma, fields, "the reference PPOConfig")
    with pytest.raises(AssertionError, match="does not have.*gamma"):
        holds(table, [f for f in fields if f != "gamma"], "the reference PPOConfig")
    renamed = [{**row, "checks that run it": "`uneven_split[epochs=3]`, `settings_sweep[settings=nope,...]`"}
               for row in table[:1]]  # fmt: skip
    assert unknown_checks(renamed, "ppo") == ["uneven_split[epochs=3]", "settings_sweep[settings=nope,...]"]
