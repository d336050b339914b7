"""The GRPO completion length statistics recomputed from the loss records' masks and ids, and their check."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle import lengths
from harness.algorithms.grpo.scenarios.rewards import REWARDS
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.loss import LossRecord
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, altered

STOP, PAD = 1, 0
CHECK = "completion_lengths"


def record(ids, lengths_, places, generation=0):
    ids = torch.tensor(ids, dtype=torch.int64)
    mask = torch.arange(ids.shape[1]) < torch.tensor(lengths_).unsqueeze(1)
    zeros = torch.zeros(mask.shape, dtype=torch.float64)
    return LossRecord(generation=generation, window=0, rank=0, completion_mask=mask, logps=zeros, old_logps=None,
                      ref_logps=None, advantages=zeros[:, 0], entropies=None, completion_ids=ids,
                      completions=torch.tensor(places))  # fmt: skip


# ---------------------------------------------------------------- the formulas on hand-made records


def test_lengths_come_from_the_mask_and_a_stop_token_counts_only_within_it():
    first = record([[5, STOP, PAD, PAD], [5, 6, 7, 8]], [2, 4], [0, 1])
    # completion 2 ended at a pad (its mask stops there): a stop token sampled after it does not count
    second = record([[5, PAD, STOP, PAD], [5, STOP, PAD, PAD]], [1, 2], [2, 0])  # completion 0 trained again
    got = lengths.trained_completions([first, second], STOP, PAD)
    assert [(c.index, c.length, c.terminated) for c in got] == [(0, 2, True), (1, 4, False), (2, 1, False)]
    stats = {n: e.value for n, e in lengths.length_stats(got).items()}
    assert stats == {
        "completions/mean_length": 7 / 3,
        "completions/min_length": 1.0,
        "completions/max_length": 4.0,
        "completions/clipped_ratio": 2 / 3,
        "completions/mean_terminated_length": 2.0,
        "completions/min_terminated_length": 2.0,
        "completions/max_terminated_length": 2.0,
    }
    assert set(stats) == set(lengths.LENGTH_NAMES) and lengths.length_stats([]) == {}


def test_no_terminated_completion_gives_zeros_and_a_pad_at_the_end_is_not_a_stop():
    got = lengths.trained_completions([record([[5, 6, 7, PAD], [5, 6, PAD, PAD]], [4, 4], [0, 1])], STOP, PAD)
    stats = lengths.length_stats(got)
    assert stats["completions/clipped_ratio"].value == 1.0
    assert all(stats[f"completions/{s}_terminated_length"].value == 0.0 for s in ("mean", "min", "max"))
    assert [c.ends_in_pad for c in got] == [True, True]  # what TRL 1.12.0 counts as terminated
    counted = lengths.length_stats(lengths.pad_as_stop(got))
    assert counted["completions/clipped_ratio"].value == 0.0


def test_records_that_do_not_say_are_not_recomputable():
    good = record([[5, STOP]], [2], [0])
    assert "stop_token_id" in lengths.trained_completions([good], None)
    no_ids = dataclasses.replace(good, completion_ids=None)
    assert "`completion_ids`" in lengths.trained_completions([no_ids], STOP)
    no_places = dataclasses.replace(good, completions=None)
    assert "`completions`" in lengths.trained_completions([no_places], STOP)
    short = dataclasses.replace(good, completion_ids=torch.tensor([[5]]))
    assert "completion_ids has shape" in lengths.trained_completions([short], STOP)
    again = record([[5, 6]], [2], [0])  # the same completion, another mask: the records contradict each other
    assert "trained again" in lengths.trained_completions([good, again], STOP)


# ---------------------------------------------------------------- the check on the reference and on broken runs


@pytest.fixture(scope="module")
def reference_cache():
    return reference("grpo")


def run_check(cache):
    return case(CHECK, "grpo").run(cache, GRPOSpec())


def reward_obs(cache):
    return cache.get(REWARDS.with_(scale_rewards=GRPOSpec().scale_rewards), spy=False)


def test_the_reference_passes_with_both_kinds_of_completion(reference_cache):
    result = run_check(reference_cache)
    assert result.passed, result.message
    assert {m.name for m in result.metrics} == set(lengths.LENGTH_NAMES)
    obs = reward_obs(reference_cache)
    stop = obs.ran.stop_token_id
    trained = [c for r in recorded(obs.ran).loss_inputs for c in lengths.trained_completions([r], stop)]
    assert any(c.terminated for c in trained) and any(c.length == REWARDS.max_completion_length for c in trained)


def test_without_ids_or_a_stop_token_the_check_is_not_recomputable(reference_cache):
    obs = reward_obs(reference_cache)
    no_ids = tuple(dataclasses.replace(r, completion_ids=None) for r in recorded(obs.ran).loss_inputs)
    for broken, why in ((altered(obs, loss_inputs=no_ids), "`completion_ids`"),
                        (altered(obs, stop_token_id=None), "`stop_token_id`")):  # fmt: skip
        result = run_check(FixedCache.of(broken))
        assert not result.passed and "not recomputable" in result.message and why in result.message


def test_a_run_without_a_completion_cut_at_the_cap_tests_nothing(reference_cache):
    obs = reward_obs(reference_cache)
    records = [dataclasses.replace(r, completion_mask=r.completion_mask.clone()) for r in recorded(obs.ran).loss_inputs]
    for r in records:
        r.completion_mask[:, -1] = False  # no completion runs to max_completion_length
    result = run_check(FixedCache.of(altered(obs, loss_inputs=tuple(records))))
    assert not result.passed and "0 ran to max_completion_length=12" in result.message
    assert "did not test" in result.message


def test_a_wrong_or_missing_length_statistic_fails(reference_cache):
    obs = reward_obs(reference_cache)
    for name, change in (("completions/mean_terminated_length", 1.0), ("completions/clipped_ratio", 1 / 16)):
        logs = [dict(log) for log in obs.ran.logs]
        logs[1][name] += change
        result = run_check(FixedCache.of(altered(obs, logs=tuple(logs))))
        assert not result.passed and f"{name} @ log 2" in result.message
    logs = [{k: v for k, v in log.items() if k != "completions/max_length"} for log in obs.ran.logs]
    result = run_check(FixedCache.of(altered(obs, logs=tuple(logs))))
    assert not result.passed and "never logged completions/max_length" in result.message


def test_a_trainer_that_takes_a_final_pad_for_the_stop_token_is_named(reference_cache):
    obs = reward_obs(reference_cache)
    records = []
    for r in recorded(obs.ran).loss_inputs:  # every completion cut at the cap now ends with a pad (as TRL pads them)
        ids, cut = r.completion_ids.clone(), r.completion_mask.all(dim=1)
        ids[cut, -1] = obs.ran.pad_token_id
        records.append(dataclasses.replace(r, completion_ids=ids))
    per_log = [lengths.trained_completions([r for r in records if r.generation == g], obs.ran.stop_token_id,
                                           obs.ran.pad_token_id) for g in (0, 1)]  # fmt: skip
    logs = [dict(log) for log in obs.ran.logs]
    for log, trained in zip(logs, per_log):
        log.update({n: e.value for n, e in lengths.length_stats(lengths.pad_as_stop(trained)).items()})
    result = run_check(FixedCache.of(altered(obs, loss_inputs=tuple(records), logs=tuple(logs))))
    assert not result.passed and "completions/clipped_ratio @ log 1" in result.message
    assert "counts a completion whose last token is the pad as ended with the stop token" in result.message
