"""The reference GRPO trainer with mask_truncated_completions (TRL's option): a completion without the stop token
in its mask is left out of the loss, its mask emptied after it is scored; its record (length, reward) and its
advantage stay those of what was sampled."""

from __future__ import annotations

import torch

from reference_trainers import grpo as G
from reference_trainers.grpo_config import GRPOConfig
from tests.trainers.test_grpo_trainer import make_trainer


def test_ended_is_the_stop_token_within_the_mask():
    completions = torch.tensor([[3, 1, 0], [3, 4, 5], [0, 1, 0], [1, 2, 2]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    assert G.ended(completions, mask, 1).tolist() == [True, False, False, True]
    assert G.ended(completions, mask, None).tolist() == [False] * 4


def generation(masked: bool) -> G.GenerationBatch:
    cfg = GRPOConfig(per_device_train_batch_size=8, gradient_accumulation_steps=2, num_generations=4,
                     max_completion_length=8, stop_token_id=1, beta=0.1, seed=0,
                     mask_truncated_completions=masked)  # fmt: skip
    return make_trainer(cfg).generate()


def test_a_truncated_completion_is_scored_as_sampled_and_left_out_of_the_loss():
    plain, masked = generation(False), generation(True)
    assert torch.equal(plain.completion_ids, masked.completion_ids)  # the same samples
    ended = G.ended(plain.completion_ids, plain.completion_mask, 1)
    assert 0 < int(ended.sum()) < len(ended), ended  # some completions ended, some were truncated
    assert not masked.completion_mask[~ended].any()
    assert torch.equal(masked.completion_mask[ended], plain.completion_mask[ended])
    assert torch.equal(masked.completion_records, plain.completion_records)  # lengths, rewards: as sampled
    assert torch.equal(masked.advantages, plain.advantages)
    assert masked.generation_tokens == float(plain.completion_mask[ended].sum())  # dapo's count: what is trained


def test_a_masked_run_logs_the_sampled_lengths():
    """The length statistics are of what was sampled, whatever the loss leaves out (as TRL logs them)."""
    kw = dict(per_device_train_batch_size=8, gradient_accumulation_steps=2, num_generations=4, max_steps=1,
              max_completion_length=8, stop_token_id=1, beta=0.1, seed=0)  # fmt: skip
    (plain,) = make_trainer(GRPOConfig(**kw)).train()
    (masked,) = make_trainer(GRPOConfig(**kw, mask_truncated_completions=True)).train()
    for name in ("completions/mean_length", "completions/clipped_ratio", "reward"):
        assert masked[name] == plain[name], name
    assert masked["completions/clipped_ratio"] > 0
