"""`reference_ppo`, the trainers' earlier package name: each of its modules is the module of `reference_trainers`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import reference_trainers

ROOT = Path(__file__).resolve().parents[2]
ALIASES = {
    "trainer": "ppo",
    "config": "ppo_config",
    "grpo": "grpo",
    "grpo_config": "grpo_config",
    "toy": "toy",
}


def run(code: str) -> str:
    """What `code` prints in a fresh interpreter (nothing imported before it), run from the repository root."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout.strip()


@pytest.mark.parametrize("old, new", sorted(ALIASES.items()))
def test_each_old_module_is_the_new_module_itself(old, new):
    import importlib

    module = importlib.import_module(f"reference_ppo.{old}")
    assert module is importlib.import_module(f"reference_trainers.{new}")
    assert sys.modules[f"reference_ppo.{old}"] is module
    assert getattr(importlib.import_module("reference_ppo"), old) is module


def test_the_import_statements_users_type_still_work():
    import reference_ppo.config
    import reference_ppo.grpo
    import reference_ppo.grpo_config
    import reference_ppo.toy
    import reference_ppo.trainer
    from reference_ppo.grpo_config import GRPOConfig
    from reference_ppo.trainer import masked_mean

    from reference_ppo import ConfigError, PPOConfig, PPOTrainer, exact_div, grpo, toy, trainer

    assert reference_ppo.trainer is trainer is reference_trainers.ppo
    assert reference_ppo.config is reference_trainers.ppo_config
    assert reference_ppo.grpo is grpo is reference_trainers.grpo
    assert reference_ppo.grpo_config is reference_trainers.grpo_config
    assert reference_ppo.toy is toy is reference_trainers.toy
    assert PPOTrainer is reference_trainers.ppo.PPOTrainer is reference_trainers.PPOTrainer
    assert PPOConfig is reference_trainers.PPOConfig and GRPOConfig is reference_trainers.GRPOConfig
    assert ConfigError is reference_trainers.ConfigError and exact_div is reference_trainers.exact_div
    assert masked_mean is reference_trainers.common.masked_mean  # imported into ppo.py, defined in common.py


def test_what_is_patched_on_the_old_name_is_patched_on_the_new(monkeypatch):
    from reference_ppo import grpo, trainer

    def spied(values, mask, axis=None):
        return values

    monkeypatch.setattr(trainer, "masked_mean", spied)
    monkeypatch.setattr(grpo, "selective_log_softmax", spied)
    assert reference_trainers.ppo.masked_mean is spied
    assert reference_trainers.grpo.selective_log_softmax is spied
    assert reference_trainers.common.masked_mean is not spied  # each trainer looks its names up in its own module


def test_the_old_name_is_an_alias_in_a_fresh_interpreter_too_and_loads_no_torch_until_asked():
    code = (
        "import sys; import reference_ppo; from reference_ppo import PPOConfig; "
        "print('torch' in sys.modules); "
        "import reference_ppo.trainer as old, reference_trainers.ppo as new; print(old is new)"
    )
    assert run(code).split() == ["False", "True"]


def test_an_unknown_module_of_the_old_name_is_not_found():
    with pytest.raises(ModuleNotFoundError):
        import reference_ppo.ppo  # noqa: F401 - only the old names are aliases
    import reference_ppo

    with pytest.raises(AttributeError):
        _ = reference_ppo.common
