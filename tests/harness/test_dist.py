"""verify-dist on 2 CPU processes: passes on the reference trainer, fails on a mean of per-rank means.

The ranks are forked from verify-dist's process by default; the tests of a failing or hanging rank run under both
launchers (`--launch fork` and `--launch torchrun`), and one passing run under torch.distributed.run's fresh
interpreters, whose report must equal the forked run's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.gate_run import documented_run, verify_dist

pytestmark = pytest.mark.dist
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_reference_trainer_passes_across_two_processes(tmp_path):
    code, report, output = documented_run("python -m harness verify-dist", __file__, tmp_path)
    assert code == 0, output[-3000:]
    assert {c["id"]: c["status"] for c in report["checks"]} == {
        "uneven_split[ranks=2]": "pass",
        "freshness[ranks=2]": "pass",
        "sampling[ranks=2]": "pass",  # each rank draws with a random stream of its own
        "lr0_ratio[ranks=2]": "pass",
        "logp_gradient[ranks=2]": "pass",
    }
    (gradient,) = [c for c in report["checks"] if c["id"] == "logp_gradient[ranks=2]"]
    assert "= 0.5 x the sum of their gradients" in gradient["message"]  # DDP averages the two ranks


@pytest.mark.slow
def test_reference_grpo_trainer_passes_across_two_processes(tmp_path):
    code, report, output = documented_run("python -m harness verify-dist --target reference-grpo", __file__, tmp_path)
    assert code == 0, output[-3000:]
    assert {c["id"]: c["status"] for c in report["checks"]} == {
        "uneven_lengths[ranks=2]": "pass",
        "freshness[ranks=2]": "pass",
        "logp_gradient[ranks=2]": "pass",
        "logp_gradient[ranks=2,loss_type=grpo]": "pass",
        "logp_gradient[ranks=2,loss_type=bnpo]": "pass",
        "logp_gradient[ranks=2,run=top_entropy]": "pass",
        "advantages[ranks=2]": "pass",
        "completion_mask[ranks=2]": "pass",
        "reward_inputs[ranks=2]": "pass",
        "sampling[ranks=2]": "pass",  # each rank draws with a random stream of its own
        "lr_schedule[ranks=2]": "pass",  # the scheduler stepped by hand, once per optimizer step
        "entropy_gradient[ranks=2]": "pass",  # the bonus's count summed over the ranks
    }
    assert report["algorithm"] == "grpo"
    (advantages,) = [c for c in report["checks"] if c["id"] == "advantages[ranks=2]"]
    assert "would differ under a rank's own std" in advantages["message"]  # the run has teeth
    for check in report["checks"]:  # every step reduced alike on both ranks: DDP's average of their gradients
        if check["id"].startswith(("logp_gradient", "entropy_gradient")):
            assert "= 0.5 x the sum of their gradients" in check["message"], check["message"]


@pytest.mark.slow
def test_mean_of_per_rank_means_fails(tmp_path):
    code, report, output = verify_dist(tmp_path, "tests.support.dist_variants:per_rank_mean")
    assert code == 1, output[-3000:]
    failed = {c["id"] for c in report["checks"] if c["status"] == "fail"}
    assert {"uneven_split[ranks=2]", "freshness[ranks=2]"} <= failed
    uneven = next(c for c in report["checks"] if c["id"] == "uneven_split[ranks=2]")
    assert "policy/entropy_avg" in {m["name"] for m in uneven["metrics"] if m["status"] == "fail"}


LAUNCHERS = pytest.mark.parametrize("launch", ["fork", "torchrun"])


@pytest.mark.slow
@LAUNCHERS
def test_a_run_that_hangs_is_stopped_with_a_clear_error(tmp_path, launch):
    target = "tests.support.dist_variants:hangs"
    # forked ranks hang within a second of the start; torch.distributed.run's fresh ranks import torch first
    timeout = {"fork": "4", "torchrun": "10"}[launch]
    code, report, output = verify_dist(tmp_path, target, "--timeout", timeout, "--launch", launch)
    assert code == 1
    assert f"timed out after {timeout}s" in report["checks"][0]["message"]
    assert not _ranks_left(target), "a rank outlived the run it timed out of"


@pytest.mark.slow
@LAUNCHERS
def test_a_rank_that_raises_fails_the_run_and_says_why(tmp_path, launch):
    target = "tests.support.dist_variants:rank_one_raises"
    code, report, output = verify_dist(tmp_path, target, "--timeout", "120", "--launch", launch)
    assert code == 1, output[-2000:]
    (check,) = report["checks"]
    assert check["id"] == "dist_run" and "timed out" not in check["message"]
    assert "rank 1 broke down" in check["message"]
    assert not _ranks_left(target), "rank 0, waiting for rank 1 in a collective, was not stopped"


def _ranks_left(target: str) -> list[int]:
    """Processes still running whose command line or parent's names `target` (the ranks of a run that ended)."""
    import psutil

    mine = os.getpid()
    left = []
    for process in psutil.process_iter(["pid", "cmdline", "ppid"]):
        if process.info["pid"] != mine and target in " ".join(process.info["cmdline"] or ()):
            left.append(process.info["pid"])
    return left


def test_unknown_target_is_a_usage_error(tmp_path):
    code, _, output = verify_dist(tmp_path, "no_such_module:factory")
    assert code == 2 and "cannot import" in output


@pytest.mark.slow
def test_metrics_outside_the_contract_may_differ_between_ranks(tmp_path):
    """A per-rank count such as TRL's val/num_eos_tokens is not the contract's: it must not fail the run; and the
    ranks started by torch.distributed.run give the report the forked ranks give, to the last digit."""
    target = "tests.support.precision_variants:extra_metrics"
    code, report, output = verify_dist(tmp_path / "torchrun", target, "--launch", "torchrun")
    assert code == 0, output[-3000:]
    assert {c["status"] for c in report["checks"]} == {"pass"}
    code, forked, output = verify_dist(tmp_path / "fork", target, "--launch", "fork")
    assert code == 0, output[-3000:]
    assert forked == report


def test_launch_fork_where_it_cannot_fork_is_a_usage_error(tmp_path, monkeypatch):
    """`--launch fork` in a process that runs a second thread: exit 2 and why, no ranks started."""
    import argparse
    import threading

    from harness import dist

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="busy")
    thread.start()
    try:
        args = argparse.Namespace(target="reference", processes=2, seed=0, timeout=5.0, launch="fork",
                                  report_dir=str(tmp_path))  # fmt: skip
        assert "threads are running" in dist.fork_refused()
        assert dist.verify_dist(args, []) == 2
    finally:
        stop.set()
        thread.join()
    assert not (tmp_path / "dist").exists()
