"""The GRPO reward oracle: rewards, advantages and reward statistics from recorded scores, and its two checks."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle import rewards
from harness.algorithms.grpo.scenarios.rewards import REWARDS
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from harness.instrument.loss import RewardCall, reward_calls
from harness.instrument.reward_calls import RewardTap, as_scores
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, altered

NAN = math.nan


def call(generation, index, scores, name=None, rank=0):
    return RewardCall(generation, rank, name or f"f{index}", index, torch.tensor(scores, dtype=torch.float64))


# ---------------------------------------------------------------- the formulas on hand-made scores


def test_normalize_then_sum_normalises_each_function_in_its_group_then_the_sum_over_the_batch():
    """Two groups of two, two functions weighted 1 and -0.5; the second group's last row is unscorable, so each
    function has one score there and no z. By hand: f0's z in group 1 is (-1, 1) / (sqrt 2 + 1e-4), f1's (1, -1) /
    (sqrt 2 + 1e-4); so R = (-1.5 z, 1.5 z, 0, NaN) with z = 1/(sqrt 2 + 1e-4), and A = (R - mean R) / (std R +
    1e-4) over the three scorable rows, 0 for the unscorable one."""
    scores = torch.tensor([[0.0, 3.0], [2.0, 1.0], [5.0, 7.0], [NAN, NAN]], dtype=torch.float64)
    advantages, zero_std = rewards.decoupled_advantages(scores, (1.0, -0.5), 2)
    z = 1 / (math.sqrt(2) + 1e-4)
    r = torch.tensor([-1.5 * z, 1.5 * z, 0.0], dtype=torch.float64)
    want = (r - r.mean()) / (r.std() + 1e-4)
    assert torch.allclose(advantages[:3], want, rtol=1e-12, atol=0) and advantages[3] == 0
    assert not zero_std.any()
    same = torch.tensor([[1.0, 2.0], [1.0, 2.0]], dtype=torch.float64)  # every z 0: the batch's R has std 0
    assert rewards.decoupled_advantages(same, (1.0, 1.0), 2)[1].all()


def test_the_reward_is_the_weighted_sum_over_the_functions_that_scored():
    scores = torch.tensor([[1.0, 2.0], [NAN, 2.0], [NAN, NAN]], dtype=torch.float64)
    got = rewards.weighted_rewards(scores, (1.0, -0.5))
    assert got[:2].tolist() == [0.0, -1.0] and math.isnan(got[2])


def test_advantages_under_each_scaling_leave_nan_rewards_out_and_give_them_zero():
    r = torch.tensor([1.0, 2.0, 3.0, NAN, 5.0, 5.0, 5.0, 5.0], dtype=torch.float64)
    group, zero = rewards.group_advantages(r, 4, "group")  # group 1: mean 2, Bessel std 1
    assert group[:4].tolist() == pytest.approx([-1 / 1.0001, 0.0, 1 / 1.0001, 0.0])
    assert group[4:].tolist() == [0.0] * 4 and zero.tolist() == [False] * 4 + [True] * 4
    none, _ = rewards.group_advantages(r, 4, "none")
    assert none.tolist() == [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    batch, _ = rewards.group_advantages(r, 4, "batch")
    std = float(torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 5.0], dtype=torch.float64).std())  # Bessel
    assert batch[0].item() == pytest.approx(-1 / (std + 1e-4))
    alone, _ = rewards.group_advantages(torch.tensor([NAN, 1.0, NAN, NAN], dtype=torch.float64), 4, "group")
    assert alone.tolist() == [0.0] * 4  # one scored reward: no std, no advantage


def test_reward_calls_become_generations_or_say_why_not():
    spec = GRPOSpec(num_generations=2, reward_weights=(1.0, 2.0))
    made = rewards.generations([call(0, 0, [1.0, 0.0]), call(0, 1, [NAN, 1.0])], spec)
    assert made[0].rewards.tolist() == [1.0, 2.0] and made[0].names == ("f0", "f1")
    assert "no reward calls" in rewards.generations([], spec)
    assert "expected one call of each of the 2" in rewards.generations([call(0, 0, [1.0, 0.0])], spec)
    assert "called twice" in rewards.generations([call(0, 0, [1.0, 0.0]), call(0, 0, [1.0, 0.0])], spec)
    odd = rewards.generations([call(0, 0, [1.0, 0.0, 1.0]), call(0, 1, [1.0, 0.0, 1.0])], spec)
    assert "not a whole number of groups" in odd
    as_dict = {f.name: getattr(call(0, 0, [1.0]), f.name) for f in dataclasses.fields(RewardCall)}
    assert reward_calls([as_dict])[0].scores.tolist() == [1.0]  # a call handed as a dict, converted
    with pytest.raises(HarnessConfigError, match="reward_calls\\[0\\]: RewardCall lacks the required key 'index'"):
        reward_calls([{k: v for k, v in as_dict.items() if k != "index"}])


def test_reward_statistics_count_each_completion_once_and_leave_empty_sets_open():
    spec = GRPOSpec(num_generations=2, reward_weights=(1.0, 2.0))
    made = rewards.generations([call(0, 0, [1.0, 3.0, 2.0, 2.0]), call(0, 1, [NAN, NAN, NAN, 1.0])], spec)
    rows = [(0, 0, 0, 0), (0, 1, 0, 1), (0, 1, 1, 0), (0, 3, 1, 1)]  # row 1 trained twice, row 2 never
    stats = rewards.reward_stats(made, rows)
    assert stats["reward"].value == pytest.approx((1 + 3 + 4) / 3)
    assert stats["rewards/f0/mean"].value == pytest.approx(2.0) and stats["frac_reward_zero_std"].value == 0.0
    assert stats["rewards/f1/std"].value == 0.0 and stats["rewards/f1/std"].count == 0  # one score: no std
    assert rewards.reward_stats(made, []) == {}


def test_the_tap_records_every_call_and_none_as_nan():
    tap = RewardTap(rank=1, generation=3)

    def scorer(completion_ids, **kwargs):
        return [None, 2]

    wrapped = tap.wrap("scorer", scorer)
    assert wrapped.__name__ == "scorer" and wrapped(completion_ids=[[1], [2]]) == [None, 2]
    (record,) = tap.calls
    assert isinstance(record, RewardCall) and (record.generation, record.rank, record.index) == (3, 1, 0)
    assert record.function == "scorer" and math.isnan(record.scores[0]) and record.scores[1] == 2.0
    assert as_scores(torch.tensor([1.0, NAN])).dtype == torch.float64


def test_the_spec_takes_one_or_two_reward_weights():
    GRPOSpec(reward_weights=(1.0, -0.5)).validate()
    with pytest.raises(HarnessConfigError, match="one or two reward functions"):
        GRPOSpec(reward_weights=(1.0, 1.0, 1.0)).validate()


# ---------------------------------------------------------------- the checks on the reference and on broken runs


@pytest.fixture(scope="module")
def reference_cache():
    return reference("grpo")


def run_check(check_id, cache):
    return case(check_id, "grpo").run(cache, GRPOSpec())


def test_the_reference_records_scores_and_rows_and_passes(reference_cache):
    for check_id in ("advantages[scale_rewards=group]", "reward_stats[scale_rewards=group]"):
        assert run_check(check_id, reference_cache).passed, check_id
    obs = reference_cache.get(REWARDS.with_(scale_rewards="group"), spy=False)
    calls = recorded(obs.ran).reward_calls
    assert [(c.generation, c.function) for c in calls] == [(0, "count_w7"), (0, "stopped"),
                                                           (1, "count_w7"), (1, "stopped")]  # fmt: skip
    assert all(c.scores.shape == (16,) for c in calls)
    trained = sorted(int(i) for r in recorded(obs.ran).loss_inputs if r.generation == 0 for i in r.completions)
    assert trained == list(range(16))  # every completion of the generation, once


def test_without_scores_or_rows_the_checks_are_not_recomputable(reference_cache):
    obs = reference_cache.get(REWARDS.with_(scale_rewards="group"), spy=False)
    no_rows = tuple(dataclasses.replace(r, completions=None) for r in recorded(obs.ran).loss_inputs)
    for broken, why in ((altered(obs, reward_calls=None), "no reward calls"),
                        (altered(obs, loss_inputs=no_rows), "does not say which completions")):  # fmt: skip
        for check_id in ("advantages[scale_rewards=group]", "reward_stats[scale_rewards=group]"):
            result = run_check(check_id, FixedCache.of(broken))
            assert not result.passed and "not recomputable" in result.message and why in result.message


def test_a_wrong_advantage_or_a_nan_one_fails(reference_cache):
    obs = reference_cache.get(REWARDS.with_(scale_rewards="group"), spy=False)
    for value in (0.5, NAN):
        records = list(recorded(obs.ran).loss_inputs)
        records[3] = dataclasses.replace(records[3], advantages=records[3].advantages.clone())
        records[3].advantages[1] += value
        result = run_check("advantages[scale_rewards=group]", FixedCache.of(altered(obs, loss_inputs=tuple(records))))
        assert (
            not result.passed
            and "advantage @ generation 0" in result.message
            and "micro-batch 4, row 2" in (result.message)
        )


def test_a_wrong_reward_statistic_fails_and_an_unlogged_empty_one_is_noted(reference_cache):
    obs = reference_cache.get(REWARDS.with_(scale_rewards="group"), spy=False)
    logs = [dict(log) for log in obs.ran.logs]
    logs[1]["reward_std"] += 0.01
    result = run_check("reward_stats[scale_rewards=group]", FixedCache.of(altered(obs, logs=tuple(logs))))
    assert not result.passed and "reward_std @ log 2" in result.message
    # one trained completion scored by the second function: its std is over an empty set, logged or not
    calls = list(recorded(obs.ran).reward_calls)
    for i, c in enumerate(calls):
        if c.function == "stopped":
            calls[i] = dataclasses.replace(c, scores=torch.full_like(c.scores, NAN))
            calls[i].scores[0] = 1.0
    logs = [{k: v for k, v in log.items() if k != "rewards/stopped/std"} for log in obs.ran.logs]
    for log in logs:
        log["rewards/stopped/mean"] = 1.0
    broken = altered(obs, reward_calls=tuple(calls), logs=tuple(logs))
    result = run_check("reward_stats[scale_rewards=group]", FixedCache.of(broken))
    assert "rewards/stopped/std over too few scores" in result.message
    assert all(m.name != "rewards/stopped/std" for m in result.metrics)
