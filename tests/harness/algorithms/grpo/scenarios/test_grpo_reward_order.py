"""advantages[reward_order=reversed] and reward_stats[reward_order=reversed]: the two reward functions handed over the
other way round than their names sort, each with its own weight. The reference passes; a trainer that keeps its
functions sorted by name (the weights in the order given: class 86, g86) fails both by name and passes the listed
order; a target that ignores reward_order, and a run whose scores cannot tell the orders apart, fail loudly."""

from __future__ import annotations

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.oracle import rewards
from harness.algorithms.grpo.runs import REWARDS
from harness.algorithms.grpo.scenarios import reward_points
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from harness.instrument.loss import RewardCall
from harness.instrument.observe import ObservationCache
from tests.support.gates import reference as shared_reference

REVERSED = ("advantages[reward_order=reversed]", "reward_stats[reward_order=reversed]")


def run_check(check_id: str, cache: ObservationCache):
    return case(check_id, "grpo").run(cache, GRPOSpec())


def diagnoses(result) -> list:
    return [m.diagnosis for m in result.metrics if m.failed and m.diagnosis is not None]


def sorted_by_name(monkeypatch) -> None:
    """Bug class 86 (g86): the reference trainer keeps the functions it is handed in a list sorted by name, while
    its weights keep the order they were given in."""
    from reference_trainers import grpo

    original = grpo.reward_functions

    def reward_functions(given):
        named = original(given)
        return named if isinstance(given, dict) else dict(sorted(named.items()))

    monkeypatch.setattr(grpo, "reward_functions", reward_functions)


def reference_ignoring_the_order(spec, accelerator=None):
    """The reference target as one that does not read reward_order: the functions and weights as listed."""
    from harness.algorithms.grpo.targets.reference import factory

    return factory(spec.with_(reward_order="as_listed"), accelerator)


reference_ignoring_the_order.algorithm = "grpo"


@pytest.mark.parametrize("check_id", REVERSED)
def test_the_reference_passes_the_reversed_order(check_id):
    result = run_check(check_id, shared_reference("grpo"))
    assert result.passed, result.message


def test_the_reference_hands_the_functions_and_weights_reversed():
    from harness.algorithms.grpo.instruments import recorded

    obs = shared_reference("grpo").get(REWARDS.with_(reward_order="reversed"), spy=False)
    assert reward_points.handed_names(obs) == ("stopped", "count_w7")
    assert obs.spec.handed_weights == (-0.5, 1.0)
    assert {c.function for c in recorded(obs.ran).reward_calls if c.index == 1} == {"count_w7"}


def test_functions_sorted_by_name_fail_the_reversed_points_alone(monkeypatch):
    sorted_by_name(monkeypatch)
    from harness.algorithms.grpo.targets.reference import factory

    cache = ObservationCache(factory)
    advantages = run_check(REVERSED[0], cache)
    assert not advantages.passed
    assert [d.classes for d in diagnoses(advantages)] == [(86,)]
    assert "paired with the functions in the other order" in diagnoses(advantages)[0].formula
    stats = run_check(REVERSED[1], cache)
    assert not stats.passed
    assert {m.name for m in stats.metrics if m.failed} == {"reward", "reward_std"}
    assert {d.classes for d in diagnoses(stats)} == {(86,)}
    for listed in ("advantages[scale_rewards=group]", "reward_stats[scale_rewards=group]"):
        result = run_check(listed, cache)
        assert result.passed, result.message


def test_a_target_that_ignores_reward_order_fails_loudly():
    cache = ObservationCache(reference_ignoring_the_order)
    for check_id in REVERSED:
        result = run_check(check_id, cache)
        assert not result.passed
        assert "must hand them over" in result.message and "['count_w7', 'stopped']" in result.message


def made_of(first: list[float], second: list[float], spec: GRPOSpec):
    calls = [RewardCall(0, 0, "a", 0, torch.tensor(first, dtype=torch.float64)),
             RewardCall(0, 0, "b", 1, torch.tensor(second, dtype=torch.float64))]  # fmt: skip
    made = rewards.generations(calls, spec)
    return made, [[(0, row, 0, row) for row in range(len(first))]]


def test_scores_that_cannot_tell_the_orders_apart_fail_loudly():
    spec = REWARDS.with_(reward_order="reversed", per_device_train_batch_size=2, steps_per_generation=2)
    same = [1.0, 0.0, 2.0, 1.0]
    made, rows = made_of(same, same, spec)  # both functions score alike: either pairing gives the same rewards
    assert "does not tell the orders apart" in reward_points.told_from_the_default(made, rows, spec, rewards.STD_EPS)
    assert "does not tell the orders apart" in reward_points.stats_told_apart(made, rows, spec)
    made, rows = made_of(same, [0.0, 1.0, 1.0, 0.0], spec)
    assert reward_points.told_from_the_default(made, rows, spec, rewards.STD_EPS) == ""
    assert reward_points.stats_told_apart(made, rows, spec) == ""
    equal = spec.with_(reward_weights=(0.5, 0.5))
    assert "two different weights" in reward_points.orders_told_apart(made, rows, equal, rewards.STD_EPS)


def test_reward_order_is_validated():
    assert REWARDS.handed_weights == (1.0, -0.5) and GRPOSpec().handed_weights is None
    with pytest.raises(HarnessConfigError, match="reward_order='sorted'"):
        REWARDS.with_(reward_order="sorted").validate()
    with pytest.raises(HarnessConfigError, match="needs the two toy reward functions"):
        GRPOSpec(reward_order="reversed").validate()
    with pytest.raises(HarnessConfigError, match="needs the two toy reward functions"):
        REWARDS.with_(reward_order="reversed", reward_model=True).validate()
