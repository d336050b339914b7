"""The GRPO gate with a reward model among the reward functions (`reward_model`), the forms the reference target
hands its rewards in, and the clipped run of `every_microbatch_applied`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle import reward_model
from harness.algorithms.grpo.runs import MODEL, REWARDS
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.targets import reference as grpo_reference
from harness.errors import HarnessConfigError
from harness.instrument.observe import ObservationCache
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, altered

STOP, PAD = 1, 0
PROMPTS = [(5, 6, 7)]


def run_check(check_id, cache):
    return case(check_id, "grpo").run(cache, GRPOSpec())


@pytest.fixture(scope="module")
def model_run():
    return reference("grpo").get(MODEL, spy=False)


# ------------------------------------------------------------------ where the score is read


def test_the_score_is_read_at_the_completions_last_token():
    # left-padded prompt, the completion through its stop token, pads after
    assert reward_model.score_position([0, 5, 6, 7, 9, 3, STOP, 0, 0], (9, 3, STOP), PROMPTS, STOP, PAD) == 6
    # an empty completion: the prompt's last token
    assert reward_model.score_position([5, 6, 7, 0, 0], (), PROMPTS, STOP, PAD) == 2
    # tokens after the completion (scored untruncated) change nothing for a causal model
    assert reward_model.score_position([5, 6, 7, 9, STOP, 4, 4], (9, STOP), PROMPTS, STOP, PAD) == 4


def test_decoded_text_may_drop_the_stop_token_and_the_special_tokens():
    assert reward_model.score_position([5, 6, 7, 9, 3, 0, 0], (9, 3, STOP), PROMPTS, STOP, PAD) == 4
    # a drawn pad inside the completion (a mask that runs through it), dropped by the decoding
    assert reward_model.score_position([5, 6, 7, 9, 3, 0], (9, PAD, 3, STOP), PROMPTS, STOP, PAD) == 4
    # a special token the target names (a BOS the policy drew) dropped too
    assert reward_model.score_position([5, 6, 7, 9, 3], (9, 2, 3, STOP), PROMPTS, STOP, PAD, special=(2,)) == 4
    assert reward_model.score_position([5, 6, 7, 9, 3], (9, 2, 3, STOP), PROMPTS, STOP, PAD) is None


def test_a_row_that_is_not_a_prompt_and_its_completion_has_no_score():
    assert reward_model.score_position([5, 6, 8, 9, STOP], (9, STOP), PROMPTS, STOP, PAD) is None  # another prompt
    assert reward_model.score_position([5, 6, 7, 4, STOP], (9, STOP), PROMPTS, STOP, PAD) is None  # another completion
    assert reward_model.score_position([5, 6, 7, 9], (9, 3, STOP), PROMPTS, STOP, PAD) is None  # cut short


# ------------------------------------------------------------------ the check on the reference trainer


def test_the_reference_hands_its_rewards_in_each_form_it_accepts():
    from harness.instrument.reward_calls import RewardTap
    from harness.targets.toy import toy_world

    world = toy_world(MODEL)
    count = grpo_reference.rewards_named(lambda q, r: r.sum(dim=1).float(), "count")
    alone = grpo_reference.handed_rewards(GRPOSpec(), world, RewardTap(), count)
    listed = grpo_reference.handed_rewards(REWARDS, world, RewardTap(), count)
    mapped = grpo_reference.handed_rewards(MODEL, world, RewardTap(), count)
    assert callable(alone) and alone.__name__ == "count_w7"
    assert isinstance(listed, list) and [f.__name__ for f in listed] == ["count_w7", "stopped"]
    assert isinstance(mapped, dict) and list(mapped) == ["count_w7", "reward_model"]
    assert mapped["reward_model"] is world.reward_model  # the module itself, watched


def test_the_reference_passes_and_its_scores_are_the_heads(model_run):
    result = run_check("reward_model", FixedCache.of(model_run))
    assert result.passed, result.message
    calls, problems = reward_model.resolved(model_run.ran, model_run.spec)
    assert problems == []
    watched = [c for c in calls if c.head is not None]
    assert len(watched) == 2 and all(not c.scores.isnan().any() for c in watched)
    # the trainer's own per-function score (its completion records' last column) is the one read from the head
    logged = model_run.ran.logs[0]["rewards/reward_model/mean"]
    trained = {(int(r.generation), int(i)) for r in recorded(model_run.ran).loss_inputs if r.generation == 0
               for i in r.completions}  # fmt: skip
    assert logged == pytest.approx(float(watched[0].scores[[i for _, i in sorted(trained)]].mean()), rel=1e-6)


def test_a_score_read_at_another_position_fails(model_run):
    calls = list(recorded(model_run.ran).reward_calls)
    k = next(i for i, c in enumerate(calls) if c.head is not None)
    head = calls[k].head.clone()
    head[:, :-1] = head[:, 1:].clone()  # every position reads the next one's output
    calls[k] = dataclasses.replace(calls[k], head=head)
    broken = altered(model_run, reward_calls=tuple(calls))
    result = run_check("reward_model", FixedCache.of(broken))
    assert not result.passed and "advantage @ generation 0" in result.message


def test_a_row_the_model_scored_that_is_not_its_completion_is_named(model_run):
    calls = list(recorded(model_run.ran).reward_calls)
    k = next(i for i, c in enumerate(calls) if c.head is not None)
    calls[k] = dataclasses.replace(calls[k], input_ids=calls[k].input_ids.roll(1, dims=0))  # rows one off
    broken = altered(model_run, reward_calls=tuple(calls))
    result = run_check("reward_model", FixedCache.of(broken))
    assert not result.passed and "which is not a prompt of the run followed by completion" in result.message


def test_a_target_that_hands_no_reward_model_is_told_its_duty(model_run):
    plain = tuple(c for c in recorded(model_run.ran).reward_calls if c.head is None)
    stand_in = [dataclasses.replace(c, function="stand_in", index=1) for c in plain]
    broken = altered(model_run, reward_calls=plain + tuple(stand_in))
    result = run_check("reward_model", FixedCache.of(broken))
    assert not result.passed and "recorded no reward-model call" in result.message
    assert "RewardTap.watch" in result.message


def test_the_spec_needs_two_weights_for_a_reward_model():
    with pytest.raises(HarnessConfigError, match="reward_model needs two reward_weights"):
        GRPOSpec(reward_model=True).validate()
    MODEL.validate()


def test_the_tap_keeps_the_heads_output_and_the_ids_and_no_score(model_run):
    watched = [c for c in recorded(model_run.ran).reward_calls if c.head is not None]
    first = watched[0]
    assert first.function == "reward_model" and first.index == 1
    assert first.head.dtype == torch.float64 and first.head.shape == first.input_ids.shape
    assert first.scores.isnan().all()  # the trainer's value is never taken: the oracle reads the head
    assert first.input_ids.shape[1] == MODEL.prompt_length + MODEL.max_completion_length


# ------------------------------------------------------------------ clipping


def ignoring_max_grad_norm(spec):
    """The reference GRPO trainer with its max_grad_norm dropped after it is built: it never clips."""
    run = grpo_reference.factory(spec)
    run.trainer.config.max_grad_norm = None
    return run


ignoring_max_grad_norm.algorithm = "grpo"


def test_a_trainer_that_does_not_clip_fails_the_clipped_run():
    check = "every_microbatch_applied[max_grad_norm=0.05]"
    assert run_check(check, reference("grpo")).passed
    result = run_check(check, ObservationCache(ignoring_max_grad_norm))
    assert not result.passed and "exceeds 0.05" in result.message
