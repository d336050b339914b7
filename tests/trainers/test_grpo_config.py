"""GRPOConfig's validation at each of its boundaries, and the sizes it derives.

Self-contained (pytest and `reference_trainers` only, no conftest, no torch): the mutmut run over the GRPO
trainer runs this module beside the GRPO gate (`harness/algorithms/grpo/algorithm.py`, `mutation.unit_tests`),
because the gate builds only valid configurations and so never reaches the branches that refuse the others.
Each rule is held at its edge: the first value refused and the first accepted.
"""

import pytest

from reference_trainers import ConfigError
from reference_trainers.grpo_config import LOSS_TYPES, SCALE_REWARDS, GRPOConfig

# a valid geometry every case starts from: 4 completions per micro-batch, groups of 4
BASE = {"per_device_train_batch_size": 4, "num_generations": 4}

SIZES = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "num_generations",
    "num_iterations",
    "max_steps",
    "logging_steps",
    "max_completion_length",
)
SOFT = ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos", "vespo_lambda_neg")


def config(**kwargs) -> GRPOConfig:
    return GRPOConfig(**{**BASE, **kwargs})


@pytest.mark.parametrize("name", SIZES)
def test_each_size_must_be_positive(name):
    # steps_per_generation set, so that it does not take gradient_accumulation_steps' 0 as its own
    fixed = {"steps_per_generation": 2} if name != "steps_per_generation" else {}
    with pytest.raises(ConfigError, match=f"positive integers: {name}=0$"):
        config(**{**fixed, name: 0})
    with pytest.raises(ConfigError, match=f"{name}=-1"):
        config(**{name: -1})


def test_every_size_that_is_not_positive_is_named_at_once():
    with pytest.raises(ConfigError, match="max_steps=0, logging_steps=0$"):
        config(max_steps=0, logging_steps=0)


def test_the_smallest_sizes_are_accepted():
    smallest = dict.fromkeys(SIZES, 1) | {"per_device_train_batch_size": 2, "num_generations": 2}
    cfg = GRPOConfig(**smallest)
    assert (cfg.local_generation_batch_size, cfg.prompts_per_generation, cfg.window_sizes) == (2, 1, (1,))


def test_a_group_needs_two_completions():
    with pytest.raises(ConfigError, match="num_generations must be at least 2 .* got 1"):
        config(num_generations=1, per_device_train_batch_size=1)
    assert config(num_generations=2).num_generations == 2


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_each_loss_type_is_accepted(loss_type):
    assert config(loss_type=loss_type).loss_type == loss_type


def test_an_unknown_loss_type_is_refused():
    with pytest.raises(ConfigError, match="loss_type must be one of .* got 'gspo'"):
        config(loss_type="gspo")


@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_each_reward_scaling_is_accepted(scale):
    assert config(scale_rewards=scale).scale_rewards == scale


def test_the_two_aggregations_are_accepted_and_another_is_refused():
    for name in ("sum_then_normalize", "normalize_then_sum"):
        assert config(multi_objective_aggregation=name).multi_objective_aggregation == name
    with pytest.raises(ConfigError, match="multi_objective_aggregation must be one of .* got 'gdpo'"):
        config(multi_objective_aggregation="gdpo")


def test_a_boolean_reward_scaling_reads_as_trl_reads_it():
    assert (config(scale_rewards=True).scale_rewards, config(scale_rewards=False).scale_rewards) == ("group", "none")


def test_an_unknown_reward_scaling_is_refused():
    with pytest.raises(ConfigError, match="scale_rewards must be one of .* got 'row'"):
        config(scale_rewards="row")


def test_temperature_must_be_positive():
    with pytest.raises(ConfigError, match="temperature must be positive, got 0"):
        config(temperature=0.0)
    with pytest.raises(ConfigError, match="temperature"):
        config(temperature=-0.5)
    assert config(temperature=1e-6).temperature == 1e-6


def test_learning_rate_may_be_zero_not_negative():
    assert config(learning_rate=0.0).learning_rate == 0.0
    with pytest.raises(ConfigError, match="learning_rate must be >= 0, got -1e-09"):
        config(learning_rate=-1e-9)


def test_beta_may_be_zero_not_negative():
    assert config(beta=0.0).beta == 0.0
    with pytest.raises(ConfigError, match="beta must be >= 0, got -1e-09"):
        config(beta=-1e-9)


@pytest.mark.parametrize("settings", [{"adam_beta1": 1.0}, {"adam_beta1": -1e-9}, {"adam_beta2": 1.0},
                                      {"adam_beta2": -1e-9}, {"adam_epsilon": 0.0}, {"adam_epsilon": -1e-9}])
def test_adams_settings_outside_their_range_are_refused(settings):
    with pytest.raises(ConfigError, match="adam_beta1 and adam_beta2 must be in \\[0, 1\\) and adam_epsilon > 0"):
        config(**settings)


def test_adams_settings_at_their_edges_are_accepted():
    cfg = config(adam_beta1=0.0, adam_beta2=0.0, adam_epsilon=1e-30)
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.adam_epsilon) == (0.0, 0.0, 1e-30)
    cfg = config(adam_beta1=0.999999, adam_beta2=0.999999)
    assert (cfg.adam_beta1, cfg.adam_beta2) == (0.999999, 0.999999)


@pytest.mark.parametrize("epsilon_low, epsilon_high", [(1.0, 0.2), (-0.01, 0.2), (0.2, -0.01), (1.5, -1.0)])
def test_clip_bounds_outside_their_range_are_refused(epsilon_low, epsilon_high):
    with pytest.raises(ConfigError, match=f"got {epsilon_low} and {epsilon_high}"):
        config(epsilon_low=epsilon_low, epsilon_high=epsilon_high)


@pytest.mark.parametrize("epsilon_low, epsilon_high", [(0.0, 0.0), (0.999, 0.0), (0.0, 5.0)])
def test_clip_bounds_at_their_edges_are_accepted(epsilon_low, epsilon_high):
    cfg = config(epsilon_low=epsilon_low, epsilon_high=epsilon_high)
    assert (cfg.epsilon_low, cfg.epsilon_high) == (epsilon_low, epsilon_high)


@pytest.mark.parametrize("name", SOFT)
def test_each_soft_loss_constant_must_be_positive(name):
    with pytest.raises(ConfigError, match=f"these must be positive: {name}=0.0$"):
        config(**{name: 0.0})
    assert getattr(config(**{name: 1e-6}), name) == 1e-6


def test_every_soft_constant_that_is_not_positive_is_named_at_once():
    with pytest.raises(ConfigError, match="sapo_temperature_pos=-1.0, vespo_lambda_neg=0.0$"):
        config(sapo_temperature_pos=-1.0, vespo_lambda_neg=0.0)


def test_delta_is_positive_or_none():
    assert config(delta=None).delta is None
    assert config(delta=1e-6).delta == 1e-6
    with pytest.raises(ConfigError, match="delta must be positive or None, got 0"):
        config(delta=0.0)


def test_a_generation_batch_must_hold_whole_groups():
    with pytest.raises(ConfigError, match=r"= 3 \* 1\) must be a multiple of num_generations"):
        config(per_device_train_batch_size=3, steps_per_generation=1)


def test_steps_per_generation_defaults_to_the_accumulation_window():
    cfg = config(gradient_accumulation_steps=3)
    assert (cfg.steps_per_generation, cfg.local_generation_batch_size, cfg.prompts_per_generation) == (3, 12, 3)
    assert config(gradient_accumulation_steps=3, steps_per_generation=2).steps_per_generation == 2


@pytest.mark.parametrize(
    "accumulation, steps, iterations, windows",
    [
        (2, 2, 1, (2,)),
        (3, 4, 1, (3, 1)),
        (4, 2, 3, (4, 2)),
        (2, 3, 2, (2, 2, 2)),
        (5, 2, 1, (2,)),
        (1, 1, 3, (1, 1, 1)),
    ],  # fmt: skip
)
def test_window_sizes_cut_a_generation_into_accumulation_windows(accumulation, steps, iterations, windows):
    cfg = config(gradient_accumulation_steps=accumulation, steps_per_generation=steps, num_iterations=iterations)
    assert cfg.window_sizes == windows
