"""GRPO's forward recompute, sampling and completion-mask checks: the reference passes, each bug they exist for
fails them by name, and a run that shows nothing to judge fails."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.scenarios.masks import mask_problem
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import ObservationCache
from tests.support.gate_variants import swapped_during_training
from tests.support.gates import reference as shared_reference

STOP, PAD = 2, 0
TOY_STOP = 1
"""The toy tokenizer's EOS (reference_trainers/toy.py: [PAD] 0, [EOS] 1, [BOS] 2)."""


def run_check(check_id: str, factory) -> object:
    return case(check_id, "grpo").run(ObservationCache(factory), GRPOSpec())


def patched(name: str, replacement):
    """The reference GRPO target with `reference_trainers.grpo.<name>` replaced by `replacement(original)` while
    it trains."""
    from harness.algorithms.grpo.targets.reference import factory

    def build(spec, accelerator=None):
        return swapped_during_training(factory(spec, accelerator), name, replacement)

    build.algorithm = "grpo"
    return build


@pytest.fixture(scope="module")
def reference():
    return shared_reference("grpo")


@pytest.mark.parametrize("check_id", ["forward_recompute", "sampling", "completion_mask"])
def test_the_reference_passes(reference, check_id):
    result = case(check_id, "grpo").run(reference, GRPOSpec())
    assert result.passed, result.message


def test_log_probs_of_unshifted_logits_fail_the_forward_recompute():
    """logits[:, P:] for logits[:, P-1:-1]: old, reference and update log-probs agree with each other, not with the
    network."""
    from reference_trainers.common import model_inputs

    def unshifted(original):
        def policy_logits(policy, query_responses, context_length, pad_token_id, temperature):
            out = policy(**model_inputs(query_responses, pad_token_id), return_dict=True)
            return out.logits[:, context_length:] / temperature

        return policy_logits

    result = run_check("forward_recompute", patched("policy_logits", unshifted))
    assert not result.passed
    assert "no prompt of the run's" in result.message and "rows with a compared position match no prompt" in (
        result.message
    )


def test_log_probs_without_the_temperature_fail_the_forward_recompute():
    def unscaled(original):
        return lambda policy, ids, context, pad, temperature: original(policy, ids, context, pad, 1.0)

    result = run_check("forward_recompute", patched("policy_logits", unscaled))
    assert not result.passed and "no prompt of the run's" in result.message


def test_sampling_colder_than_the_log_probs_fails_sampling_and_not_the_forward_recompute():
    """Completions drawn at a quarter of the temperature the log-probs are taken at."""

    def colder(original):
        return lambda policy, queries, length, temperature, stop, pad: original(policy, queries, length,
                                                                                temperature / 4, stop, pad)  # fmt: skip

    factory = patched("sample_responses", colder)
    cache = ObservationCache(factory)
    sampled = case("sampling", "grpo").run(cache, GRPOSpec())
    assert not sampled.passed and "more probable than draws" in sampled.message, sampled.message
    assert case("forward_recompute", "grpo").run(cache, GRPOSpec()).passed


def test_a_mask_past_the_stop_token_and_one_without_it_fail_by_name():
    def past(original):
        def response_masks(postprocessed, pad_token_id):
            lengths, _, value_mask = original(postprocessed, pad_token_id)
            return lengths, value_mask, value_mask

        return response_masks

    result = run_check("completion_mask", patched("response_masks", past))
    assert not result.passed and "token(s) past its stop token" in result.message

    def without_stop(original):
        def response_masks(postprocessed, pad_token_id):
            lengths, mask, value_mask = original(postprocessed, pad_token_id)
            return lengths, mask & (postprocessed != TOY_STOP), value_mask

        return response_masks

    result = run_check("completion_mask", patched("response_masks", without_stop))
    assert not result.passed and "leaves out its stop token" in result.message, result.message


@pytest.mark.parametrize(
    ("ids", "mask", "problem"),
    [
        ([5, 6, STOP, PAD, PAD], [1, 1, 1, 0, 0], ""),
        ([5, 6, STOP, PAD, PAD], [1, 1, 1, 1, 0], "1 token(s) past its stop token at position 2"),
        ([5, 6, STOP, PAD, PAD], [1, 1, 0, 0, 0], "leaves out its stop token at position 2"),
        ([5, 6, 7, 8, 9], [1, 1, 1, 1, 1], ""),
        ([5, 6, 7, 8, 9], [0, 0, 0, 0, 0], ""),  # truncated, masked out (mask_truncated_completions)
        ([5, 6, 7, 8, 9], [1, 1, 1, 1, 0], "covers positions 0..3, where it has no stop token"),
        ([5, PAD, 7, STOP, PAD], [1, 0, 0, 0, 0], ""),  # ended at a pad it drew
        ([5, PAD, 7, STOP, PAD], [1, 1, 1, 1, 0], ""),  # or ran on to the stop token
        ([5, PAD, 7, STOP, PAD], [1, 1, 0, 0, 0], "covers positions 0..1, where its stop token is at position 3"),
        ([5, 6, STOP, PAD, PAD], [1, 0, 1, 0, 0], "not one run of positions from 0"),
        ([STOP, PAD, PAD], [1, 0, 0], ""),
        ([STOP, PAD, PAD], [0, 0, 0], "leaves out its stop token at position 0"),
    ],
)
def test_the_mask_rule(ids, mask, problem):
    found = mask_problem(torch.tensor(ids), torch.tensor(mask, dtype=torch.bool), STOP, PAD)
    assert (problem in found) if problem else found == "", found


def test_a_run_without_its_networks_is_not_recomputable():
    from harness.algorithms.grpo.targets.reference import factory

    def hidden(spec, accelerator=None):
        run = factory(spec, accelerator)
        run.models = None
        return run

    hidden.algorithm = "grpo"
    cache = ObservationCache(hidden)
    for check_id in ("forward_recompute", "sampling"):
        result = case(check_id, "grpo").run(cache, GRPOSpec())
        assert not result.passed and "exposes no `models`" in result.message, check_id


def test_a_group_of_mixed_prompts_is_named_unless_one_prompt_explains_them_all():
    from harness.algorithms.grpo.scenarios.forward import RowForward, group_problems
    from harness.instrument.loss import LossRecord

    ones = torch.ones(4, 3, dtype=torch.bool)
    record = LossRecord(generation=1, window=0, rank=0, completion_mask=ones, logps=torch.zeros(4, 3),
                        old_logps=None, ref_logps=None, advantages=torch.zeros(4), entropies=None,
                        completions=torch.tensor([0, 1, 2, 3]))  # fmt: skip
    row = RowForward(record, ones, torch.ones(4, dtype=torch.bool), torch.tensor([5, 5, 7, 7]), {})
    (problem,) = group_problems([row], 4, lambda row, j, prompt: False)
    assert "generation 1, group 0: completions [2, 3] are not explained by prompt 5" in problem
    assert group_problems([row], 2, lambda row, j, prompt: False) == []  # groups {0, 1} and {2, 3}: one prompt each
    assert group_problems([row], 4, lambda row, j, prompt: True) == []  # a wide tolerance: prompt 5 explains all


def test_the_reference_passes_the_forward_recompute_at_bfloat16():
    """At bfloat16 several prompts may explain a row within the row's tolerance; its group is still one prompt's."""
    result = case("forward_recompute", "grpo").run(shared_reference("grpo"), GRPOSpec(dtype="bfloat16"))
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("ids", "tokens"),
    [([5, 6, STOP, PAD, PAD], (5, 6, STOP)), ([5, 6, STOP, 8, 9], (5, 6, STOP)), ([5, PAD, 7], (5, PAD, 7)),
     ([5, 6, PAD, PAD], (5, 6)), ([PAD, PAD], ())],
)  # fmt: skip
def test_a_completion_is_its_tokens_up_to_the_stop_token(ids, tokens):
    from harness.algorithms.grpo.scenarios.reward_inputs import completion_tokens

    assert completion_tokens(ids, STOP, PAD) == tokens


def test_rewards_given_other_completions_fail_reward_inputs_and_unrecorded_inputs_are_not_recomputable():
    def rolled(original):
        def rewards_per_function(funcs, queries, completions, lengths, pad):
            return original(funcs, queries, completions.roll(1, 0), lengths.roll(1, 0), pad)

        return rewards_per_function

    result = run_check("reward_inputs", patched("rewards_per_function", rolled))
    assert not result.passed and "it is completion" in result.message, result.message
    assert "each score is assigned to another completion than it scored" in result.message

    result = run_check("reward_inputs", recorded_without("completion_ids"))
    assert not result.passed and "recorded no reward call's inputs" in result.message, result.message


def test_rewards_given_no_prompts_or_other_groups_prompts_fail_reward_inputs():
    """The reference records the prompts beside the completions (RewardTap.wrap's `prompts`): a reward handed None
    for them, or the prompts rolled by one row (so a group's completions get two prompts), fails; TRL's target
    records none, which is a note."""
    from harness.algorithms.grpo.targets.reference import factory

    assert "given one prompt per completion, shared by each group" in run_check("reward_inputs", factory).message

    def no_prompts(original):
        def sequence_scores(reward, queries, *rest):
            if not callable(reward) or isinstance(reward, torch.nn.Module):
                return original(reward, queries, *rest)
            return original(lambda prompts, completions: reward(None, completions), queries, *rest)

        return sequence_scores

    result = run_check("reward_inputs", patched("sequence_scores", no_prompts))
    assert not result.passed and "0 prompts given beside 16 completions" in result.message, result.message

    def rolled(original):
        def rewards_per_function(funcs, queries, completions, lengths, pad):
            return original(funcs, queries.roll(1, 0), completions, lengths, pad)

        return rewards_per_function

    result = run_check("reward_inputs", patched("rewards_per_function", rolled))
    assert not result.passed and "were given different prompts" in result.message, result.message

    result = run_check("reward_inputs", recorded_without("prompt_ids"))
    assert result.passed and "recorded no prompts given to its reward functions" in result.message, result.message


def recorded_without(field: str):
    """The reference GRPO target whose reward tap keeps each call without `field` (what it was given)."""
    from harness.algorithms.grpo.targets.reference import factory

    class Dropped(list):
        def append(self, call):
            super().append(dataclasses.replace(call, **{field: None}))

    def build(spec, accelerator=None):
        run = factory(spec, accelerator)
        run.rewards.calls = Dropped(run.rewards.calls)
        return run

    build.algorithm = "grpo"
    return build


def test_a_sampler_not_handed_the_temperature_fails_sampling():
    """The completions drawn at temperature 1 while the log-probs are taken at the run's 0.5 (at 0.7 the toy
    policy's small logits hid it: |Z| 3.9 and 3.0 at seeds 0 and 1)."""

    def at_one(original):
        return lambda policy, queries, length, temperature, stop, pad: original(policy, queries, length, 1.0, stop, pad)

    result = run_check("sampling", patched("sample_responses", at_one))
    assert not result.passed and "hotter sampling than the log-probs' temperature" in result.message, result.message
