"""GRPO reward and length scenarios: a run that cannot show what the scenario needs names whose duty it is, and a
length statistic off by a known rule names it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle import lengths
from harness.algorithms.grpo.oracle.expect import intervals
from harness.algorithms.grpo.scenarios.rewards import REWARDS
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import ObservationCache
from harness.report import Report
from harness.report.terminal import render_terminal
from tests.support.grpo_doubles import FixedCache, altered


@pytest.fixture(scope="module")
def reference_cache():
    from harness.algorithms.grpo.targets.reference import factory

    return ObservationCache(factory)


def run_check(check_id, obs):
    return case(check_id, "grpo").run(FixedCache.of(obs), GRPOSpec())


def terminal(result) -> str:
    report = Report("reference-grpo", "cpu", algorithm="grpo", dtype="float32", torch="2.13.0", seed=0)
    report.add(result)
    return render_terminal(report).splitlines()[1]


def reward_obs(cache):
    return cache.get(REWARDS.with_(scale_rewards="group"), spy=False)


def test_reward_functions_that_score_every_completion_are_the_targets_to_fix(reference_cache):
    obs = reward_obs(reference_cache)
    calls = [dataclasses.replace(c, scores=c.scores.nan_to_num(nan=0.0)) if c.function == "stopped" else c
             for c in recorded(obs.ran).reward_calls]  # fmt: skip
    result = run_check("advantages[scale_rewards=group]", altered(obs, reward_calls=tuple(calls)))
    assert not result.passed
    message = result.message
    assert "with reward_weights=(1.0, -0.5) the target must hand its trainer 2 partial reward functions" in message
    assert "each unable to score some completions (NaN), and some completions neither can score" in message
    assert "0 no reward function scored" in message and "docs/using-the-gate.md" in message
    assert run_check("advantages[scale_rewards=group]", obs).passed


def dropping_the_stop(record, stop):
    """The record with each completion's stop token taken out of its mask (the mask ends one token early)."""
    mask = record.completion_mask.clone()
    ids = torch.as_tensor(record.completion_ids)
    for j in range(mask.shape[0]):
        at = ((ids[j] == stop) & mask[j]).nonzero()
        if len(at):
            mask[j, int(at[0]) :] = False
    return dataclasses.replace(record, completion_mask=mask)


def test_a_mask_without_the_stop_token_is_the_trainers_to_fix(reference_cache):
    obs = reward_obs(reference_cache)
    stop = obs.ran.stop_token_id
    records = tuple(dropping_the_stop(r, stop) for r in recorded(obs.ran).loss_inputs)
    result = run_check("completion_lengths", altered(obs, loss_inputs=records))
    assert not result.passed
    assert "no trained completion's mask holds the stop token" in result.message
    assert "the trainer's mask drops it" in result.message and 'docs/grpo-metrics.md, "mask"' in result.message
    assert "ended with the stop token and" not in result.message
    assert run_check("completion_lengths", obs).passed


def ending_in_pad(obs):
    """The reference's records with one completion that ran to max_completion_length ending in the pad token."""
    pad, cap, done, records = obs.ran.pad_token_id, obs.spec.max_completion_length, set(), []
    for record in recorded(obs.ran).loss_inputs:
        ids = torch.as_tensor(record.completion_ids).clone()
        for j in range(ids.shape[0]):
            key = (int(record.generation), int(record.completions[j]))
            if int(record.completion_mask[j].sum()) == cap and (not done or key in done):
                ids[j, cap - 1] = pad
                done.add(key)
        records.append(dataclasses.replace(record, completion_ids=ids))
    assert done, "no completion ran to max_completion_length"
    return tuple(records)


def test_a_pad_counted_as_the_stop_token_is_named_and_another_gap_is_not(reference_cache):
    obs = reward_obs(reference_cache)
    records = ending_in_pad(obs)
    stats = []
    for interval in intervals(records, obs.spec):
        trained = lengths.trained_completions(interval, obs.ran.stop_token_id, obs.ran.pad_token_id)
        stats.append({n: e.value for n, e in lengths.length_stats(lengths.pad_as_stop(trained)).items()})
    logs = tuple({**log, **stat} for log, stat in zip(obs.ran.logs, stats))
    result = run_check("completion_lengths", altered(obs, loss_inputs=records, logs=logs))
    assert not result.passed
    assert {m.diagnosis.classes for m in result.metrics if m.failed} == {(54,)}
    assert "= a completion whose last token is the pad counted as ended with the stop token (class 54)" in terminal(
        result
    )
    assert run_check("completion_lengths", altered(obs, loss_inputs=records)).passed
    off = tuple({**log, "completions/clipped_ratio": log["completions/clipped_ratio"] + 0.1} for log in obs.ran.logs)
    other = run_check("completion_lengths", altered(obs, loss_inputs=records, logs=off))
    assert not other.passed and all(m.diagnosis is None for m in other.metrics)
