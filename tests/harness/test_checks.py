"""Check ids are generated once, from the scenarios, and every consumer reads them from there."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.algorithms import case, cases, check_ids
from harness.verdict import CheckId
from tests.docs import documented
from tests.support import forked

ROOT = Path(__file__).resolve().parents[2]


def test_ids_are_unique_and_formed_from_scenario_and_params():
    ids = [str(c.id) for c in cases("ppo")]
    # 13, 2 of the training signal, 3 + 1 of the gradient, 2 of the forward recompute, 2 of the
    # sampling, 30 of the sweep
    # (4 settings x 6 checks; 2 with dropout; the reward model's and the reward on text's profiles sweep only the
    # two that read scores), and the optimizer's step
    assert len(ids) == len(set(ids)) == 58
    assert "settings_sweep[settings=reward_model,check=training_signal]" in ids
    assert "settings_sweep[settings=reward_text,check=rollout_objectives]" in ids
    assert "settings_sweep[settings=reward_model,check=uneven_split]" not in ids
    assert str(CheckId("uneven_split", (("epochs", 1),))) == "uneven_split[epochs=1]" in ids
    assert str(CheckId("freshness")) == "freshness" in ids
    assert case("rollout_objectives[rollout=padding_rows]").param("rollout") == "padding_rows"


def test_a_sweep_that_is_not_a_product_lists_its_points():
    from harness.scenario import Scenario

    def check(cache, run, case):
        return None

    product = Scenario("s", check, (("a", (1, 2)),), points=((("a", 3), ("b", 0)),))
    assert [str(c.id) for c in product.cases()] == ["s[a=1]", "s[a=2]", "s[a=3,b=0]"]
    assert [str(c.id) for c in Scenario("s", check, points=((("a", 3),),)).cases()] == ["s[a=3]"]
    assert [str(c.id) for c in Scenario("s", check).cases()] == ["s"]
    dropout = [c.param("check") for c in cases("ppo") if c.param("settings") == "dropout"]
    assert dropout == ["lr0_ratio", "gradient_partition"]  # the checks that compare the update with the rollout


def test_docs_checks_md_is_what_the_cli_prints():
    _, args = documented.argv("python -m harness checks --markdown", __file__)  # as docs/checks.md says
    printed = forked.run(args, cwd=ROOT, check=True).stdout
    assert (ROOT / "docs" / "checks.md").read_text(encoding="utf-8") == printed, (
        "docs/checks.md is stale: python -m harness checks --markdown > docs/checks.md"
    )


def test_the_mutant_catalogue_names_the_generated_ids():
    from mutants import catalogue

    assert {cid: scenario for cid, (scenario, _) in catalogue.CHECKS.items()} == check_ids("ppo")
    assert all(node == f"test_check[{cid}]" for cid, (_, node) in catalogue.CHECKS.items())


def test_an_unknown_check_id_is_a_usage_error(tmp_path):
    proc = forked.run(
        [sys.executable, "-m", "harness", "verify", "--check", "uneven_split[epochs=9]", "--report-dir", str(tmp_path)],
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "unknown check id(s) uneven_split[epochs=9]" in proc.stdout + proc.stderr
