"""verify-dist and what a target cannot run: a check it declares not applicable is reported so, with its reason, and
its run is not made; a run that cannot be configured errs only the checks that read it, and the others still run and
report, before the command exits 2 naming them; `--set` reaches every rank's runs."""

from __future__ import annotations

import argparse

import pytest

from harness import dist
from harness.algorithms import get
from harness.algorithms.ppo.ranks import rank_specs as ppo_rank_specs
from harness.targets import resolve
from tests.support.gate_run import verify_dist

pytestmark = pytest.mark.dist


@pytest.mark.slow
def test_a_run_that_cannot_be_configured_errs_only_the_checks_that_read_it(tmp_path):
    code, report, output = verify_dist(tmp_path, "tests.support.dist_applicability:no_lr0")
    assert code == 2, output[-3000:]
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses == {"uneven_split[ranks=2]": "pass", "freshness[ranks=2]": "pass", "sampling[ranks=2]": "pass",
                        "lr0_ratio[ranks=2]": "error", "logp_gradient[ranks=2]": "error"}, statuses  # fmt: skip
    (lr0,) = [c for c in report["checks"] if c["id"] == "lr0_ratio[ranks=2]"]
    assert "configuration error: this trainer refuses learning_rate=0 (run lr0_ratio)" in lr0["message"]
    assert "2 checks could not be configured: lr0_ratio[ranks=2], logp_gradient[ranks=2]; a target that cannot " \
           "run a check declares it not applicable" in output  # fmt: skip


@pytest.mark.slow
def test_checks_declared_not_applicable_are_reported_so_and_their_run_is_not_made(tmp_path):
    code, report, output = verify_dist(tmp_path, "tests.support.dist_applicability:declares_no_lr0")
    assert code == 0, output[-3000:]
    checks = {c["id"]: c for c in report["checks"]}
    assert {i: c["status"] for i, c in checks.items()} == {
        "uneven_split[ranks=2]": "pass", "freshness[ranks=2]": "pass", "sampling[ranks=2]": "pass",
        "lr0_ratio[ranks=2]": "not_applicable", "logp_gradient[ranks=2]": "not_applicable"}  # fmt: skip
    assert checks["lr0_ratio[ranks=2]"]["message"] == "this trainer refuses learning_rate=0"


def test_only_the_runs_a_check_that_applies_reads_are_planned():
    target, algorithm = resolve("tests.support.dist_applicability:declares_no_lr0"), get("ppo")
    assert list(dist.planned_runs(target, algorithm, 2, 0, {})) == ["uneven_split"]
    assert list(dist.planned_runs(resolve("reference"), algorithm, 2, 0, {})) == ["uneven_split", "lr0_ratio"]


def test_every_check_of_verify_dist_says_which_runs_it_reads():
    for name in ("ppo", "grpo"):
        algorithm = get(name)
        reads = algorithm.rank_reads(2)
        assert {run for runs in reads.values() for run in runs} == set(algorithm.rank_specs(0)), name


def test_set_reaches_every_rank_run_but_a_setting_the_run_sets_itself():
    specs = ppo_rank_specs(3, {"temperature": 0.7, "kl_estimator": "k3"})
    assert all(s.temperature == 0.7 and s.kl_estimator == "k3" and s.seed == 3 for s in specs.values())
    grpo = get("grpo").rank_specs(0, {"loss_type": "sapo", "scale_rewards": "none", "temperature": 0.7})
    assert grpo["uneven_lengths"].loss_type == "sapo" and grpo["logp_gradient_bnpo"].loss_type == "bnpo"
    assert grpo["advantages"].scale_rewards == "batch" and grpo["uneven_lengths"].scale_rewards == "none"
    assert all(s.temperature == 0.7 for s in grpo.values())


def test_a_bad_set_is_a_usage_error_before_any_rank_starts(tmp_path, capsys):
    args = argparse.Namespace(target="reference", processes=2, seed=0, timeout=5.0, launch=None,
                              report_dir=str(tmp_path), settings=["per_device_train_batch_size=8"])  # fmt: skip
    assert dist.verify_dist(args, []) == 2
    assert "per_device_train_batch_size" in capsys.readouterr().err
    assert not (tmp_path / "dist").exists()
