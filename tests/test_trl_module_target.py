"""`--target trl:MODULE`: TRL's adapter on a module of your own instead of the installed trainer.

A copy of TRL 1.12.0's `ppo_trainer.py` in a package of its own (as a contributor patching it
would have it) gets the same verdict as `--target trl`, on two checks: one TRL fails, one it passes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from harness.algorithms.ppo.scenarios import LR0
from harness.errors import HarnessConfigError
from harness.targets import resolve

COPY = "patched_trl.ppo_trainer"
CHECKS = ("lr0_ratio[epochs=1]", "rollout_objectives[rollout=padding_rows]")
needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")


def copy_trl_trainer(root: Path) -> Path:
    """TRL's ppo_trainer.py as `patched_trl/ppo_trainer.py` under `root`, its relative imports made absolute."""
    with warnings.catch_warnings():  # importing trl.experimental warns that it is experimental
        warnings.simplefilter("ignore")
        source = Path(importlib.util.find_spec("trl.experimental.ppo.ppo_trainer").origin).read_text()
    for dots, package in (("...", "trl."), ("..", "trl.experimental."), (".", "trl.experimental.ppo.")):
        source = re.sub(rf"^(\s*)from {re.escape(dots)}(?=\w)", rf"\1from {package}", source, flags=re.M)
    assert not re.search(r"^\s*from \.", source, flags=re.M), "a relative import was left"
    package = root / "patched_trl"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ppo_trainer.py").write_text(source)
    return root


def verify(target: str, out: Path, pythonpath: Path) -> tuple[int, dict, str]:
    checks = [arg for check in CHECKS for arg in ("--check", check)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(pythonpath), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "verify", "--target", target, "--report-dir", str(out), *checks],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    report = json.loads((out / "verify.json").read_text()) if (out / "verify.json").exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


def verdict(report: dict) -> dict:
    """Each check's status and each metric's logged value."""
    return {
        check["id"]: (check["status"], [(m["name"], m["where"], m["logged"], m["status"]) for m in check["metrics"]])
        for check in report["checks"]
    }


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
