"""`--set KEY=VALUE` (harness/settings.py): a trainer setting of every scenario, typed by the spec; a field every
scenario sets itself (its geometry) is refused saying so, one line and exit 2, as is a field the command sets."""

from __future__ import annotations

import pytest

from harness.algorithms import get
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError


@pytest.mark.parametrize(("algorithm", "key"), [("ppo", "per_device_train_batch_size"), ("ppo", "num_mini_batches"),
                                                ("grpo", "gradient_accumulation_steps"),
                                                ("grpo", "steps_per_generation")])  # fmt: skip
def test_a_geometry_the_scenarios_set_is_refused_saying_so(algorithm, key):
    with pytest.raises(HarnessConfigError) as raised:
        get(algorithm).parse_settings([f"{key}=8"])
    said = str(raised.value)
    assert f"every scenario sets {key} itself" in said and "\n" not in said and "temperature" in said


def test_the_seed_is_the_commands_own():
    with pytest.raises(HarnessConfigError, match="seed is no trainer setting: the command sets it"):
        get("grpo").parse_settings(["seed=3"])


def test_an_unknown_key_lists_the_settable_ones():
    with pytest.raises(HarnessConfigError, match="expected KEY=VALUE with KEY one of temperature"):
        get("ppo").parse_settings(["no_such_key=1"])


def test_grpo_delta_is_refused_with_its_reason():
    with pytest.raises(HarnessConfigError, match="--set does not take delta: TRL corrects the KL by the ratio"):
        get("grpo").parse_settings(["delta=1.5"])
    assert GRPOSpec().delta is None
