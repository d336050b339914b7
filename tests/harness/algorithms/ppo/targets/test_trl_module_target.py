"""`--target trl:MODULE`: TRL's adapter on a module of your own instead of the installed trainer.

A copy of TRL 1.12.0's `ppo_trainer.py` in a package of its own (as a contributor patching it
would have it) gets the same verdict as `--target trl`, on two checks: one TRL fails, one it passes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.algorithms.ppo.runs import LR0
from harness.errors import HarnessConfigError
from harness.targets import resolve
from tests.support import gate_run
from tests.support.trl_copies import copy_installed_module

COPY = "patched_trl.ppo_trainer"
CHECKS = ("lr0_ratio[epochs=1]", "rollout_objectives[rollout=padding_rows]")
needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")


def copy_trl_trainer(root: Path) -> Path:
    """TRL's ppo_trainer.py as `patched_trl/ppo_trainer.py` under `root`, its relative imports made absolute."""
    return copy_installed_module("trl.experimental.ppo.ppo_trainer", root, "patched_trl")


def verify(target: str, out: Path, pythonpath: Path) -> tuple[int, dict, str]:
    checks = [arg for check in CHECKS for arg in ("--check", check)]
    return gate_run.verify(out, "--target", target, *checks, timeout=600, pythonpath=pythonpath)


def verdict(report: dict) -> dict:
    """Each check's status and each metric's logged value."""
    return {
        check["id"]: (check["status"], [(m["name"], m["where"], m["logged"], m["status"]) for m in check["metrics"]])
        for check in report["checks"]
    }


@pytest.mark.slow
@needs_trl
@pytest.mark.trl
def test_a_copy_of_trls_trainer_gets_trls_verdict(tmp_path):
    root = copy_trl_trainer(tmp_path / "src")
    code, report, output = verify(f"trl:{COPY}", tmp_path / "copy", root)
    trl_code, trl_report, trl_output = verify("trl", tmp_path / "installed", root)
    assert trl_code == 1, trl_output[-3000:]
    assert code == trl_code, output[-3000:]
    assert report["target"] == f"trl:{COPY}" and trl_report["target"] == "trl"
    assert verdict(report) == verdict(trl_report)
    assert {c["id"]: c["status"] for c in report["checks"]} == dict(zip(CHECKS, ("fail", "pass")))


@needs_trl
@pytest.mark.trl
def test_the_run_uses_the_named_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(copy_trl_trainer(tmp_path)))
    target = resolve(f"trl:{COPY}")
    assert (target.name, target.algorithm, target.factory.module) == (f"trl:{COPY}", "ppo", COPY)
    run = target.factory(LR0)
    assert run.module.__name__ == COPY and run.module.__file__.startswith(str(tmp_path))
    assert type(run.trainer).__module__ == COPY


def test_a_module_without_trls_names_is_a_config_error():
    with pytest.raises(HarnessConfigError, match="has no PPOTrainer, PPOConfig, masked_mean, selective_log_softmax"):
        resolve("trl:json").factory(LR0)
    with pytest.raises(HarnessConfigError, match="cannot import 'no_such_pkg.ppo_trainer'"):
        resolve("trl:no_such_pkg.ppo_trainer").factory(LR0)
    with pytest.raises(HarnessConfigError, match="name a module after 'trl:'"):
        resolve("trl:")
