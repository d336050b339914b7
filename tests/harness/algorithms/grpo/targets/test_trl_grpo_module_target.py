"""`--target trl-grpo:MODULE`: TRL's GRPO adapter on a module of your own instead of the installed trainer, and
how the adapter chooses where it records the log-probs and entropies (entry.py).

A copy of the installed TRL's `grpo_trainer.py` in a package of its own (as a contributor patching it would have
it) gets the same verdict as `--target trl-grpo` on two checks: one TRL fails, one it passes.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from harness.algorithms.grpo.runs import UNEVEN
from harness.errors import HarnessConfigError
from harness.targets import resolve
from tests.support import gate_run
from tests.support.trl_copies import COPY, copy_trl_grpo_trainer

CHECKS = ("reward_stats[scale_rewards=batch]", "logit_recompute")
needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")


def verify(target: str, out: Path, pythonpath: Path) -> tuple[int, dict, str]:
    checks = [arg for check in CHECKS for arg in ("--check", check)]
    return gate_run.verify(out, "--target", target, *checks, timeout=600, pythonpath=pythonpath)


@pytest.mark.slow
@needs_trl
@pytest.mark.trl
def test_a_copy_of_trls_grpo_trainer_gets_trls_verdict(tmp_path):
    root = copy_trl_grpo_trainer(tmp_path / "src")
    code, report, output = verify(f"trl-grpo:{COPY}", tmp_path / "copy", root)
    assert code == 1, output[-3000:]
    assert report["target"] == f"trl-grpo:{COPY}"
    assert {c["id"]: c["status"] for c in report["checks"]} == dict(zip(CHECKS, ("fail", "pass")))


@needs_trl
@pytest.mark.trl
def test_the_grpo_run_uses_the_named_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(copy_trl_grpo_trainer(tmp_path)))
    target = resolve(f"trl-grpo:{COPY}")
    assert (target.name, target.algorithm, target.factory.module) == (f"trl-grpo:{COPY}", "grpo", COPY)
    run = target.factory(UNEVEN)
    assert run.module.__name__ == COPY and run.module.__file__.startswith(str(tmp_path))
    assert type(run.trainer).__module__ == COPY


class _Trainer:
    def _compute_loss(self): ...
    def _get_per_token_logps_and_entropies(self): ...
    def _generate_and_score_completions(self): ...


def _function(*args):
    return args


def _module(name: str, **names) -> types.ModuleType:
    module = types.ModuleType(name)
    module.GRPOTrainer = _Trainer
    vars(module).update(names)
    return module


def test_the_entry_points_are_chosen_by_what_the_module_has(monkeypatch):
    from harness.algorithms.grpo.targets.trl import entry

    split = _module("split", selective_log_softmax=_function, entropy_from_logits=_function)
    assert entry.entry_points(split).way == "logits"
    joint = _module("joint", selective_log_softmax=_function, selective_log_softmax_and_entropy=_function)
    assert entry.entry_points(joint).logits == ((joint, "selective_log_softmax_and_entropy", "joint"),)
    head_home = types.ModuleType("fused_home")
    head_home._ChunkedLogProbFunction = type("Chunked", (), {"apply": staticmethod(_function)})
    monkeypatch.setitem(sys.modules, "fused_home", head_home)
    fused = types.FunctionType(_function.__code__, {"__name__": "fused_home"}, "add_fused_lm_head")
    assert fused.__module__ == "fused_home"
    head = _module("head", add_fused_lm_head=fused, selective_log_softmax_and_entropy=_function)
    assert entry.entry_points(head).logits == ((head_home._ChunkedLogProbFunction, "apply", "head"),)
    head_home._ChunkedLogProbFunction = None  # TRL 1.15.0 without triton
    with pytest.raises(HarnessConfigError, match=r"_ChunkedLogProbFunction is None: .*needs triton \(a CUDA"):
        entry.entry_points(head)
    with pytest.raises(HarnessConfigError, match="has none of the functions the adapter records"):
        entry.entry_points(_module("bare", selective_log_softmax=_function))


def test_a_module_without_trls_grpo_names_is_a_config_error():
    with pytest.raises(HarnessConfigError, match="has no GRPOTrainer, GRPOConfig"):
        resolve("trl-grpo:json").factory(UNEVEN)
    with pytest.raises(HarnessConfigError, match="cannot import 'no_such_pkg.grpo_trainer'"):
        resolve("trl-grpo:no_such_pkg.grpo_trainer").factory(UNEVEN)
