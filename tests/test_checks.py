"""Check ids are generated once, from the scenarios, and every consumer reads them from there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.algorithms import case, cases, check_ids
from harness.verdict import CheckId

ROOT = Path(__file__).resolve().parents[1]


def test_ids_are_unique_and_formed_from_scenario_and_params():
    ids = [str(c.id) for c in cases("ppo")]
    assert len(ids) == len(set(ids)) == 41  # 13, 2 of the signal, 3 + 1 of the gradient, 2 sampling, 20 of the sweep
    assert str(CheckId("uneven_split", (("epochs", 1),))) == "uneven_split[epochs=1]" in ids
    assert str(CheckId("freshness")) == "freshness" in ids
    assert case("rollout_objectives[rollout=padding_rows]").param("rollout") == "padding_rows"


def test_docs_checks_md_is_what_the_cli_prints():
    printed = subprocess.run(
        [sys.executable, "-m", "harness", "checks", "--markdown"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert (ROOT / "docs" / "checks.md").read_text(encoding="utf-8") == printed, (
        "docs/checks.md is stale: python -m harness checks --markdown > docs/checks.md"
    )


def test_the_mutant_catalogue_names_the_generated_ids():
    from mutants import catalogue

    assert {cid: scenario for cid, (scenario, _) in catalogue.CHECKS.items()} == check_ids("ppo")
    assert all(node == f"test_check[{cid}]" for cid, (_, node) in catalogue.CHECKS.items())


def test_an_unknown_check_id_is_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "verify", "--check", "uneven_split[epochs=9]", "--report-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "unknown check id(s) uneven_split[epochs=9]" in proc.stdout + proc.stderr
