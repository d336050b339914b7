"""What a GRPO target wraps around the reward functions it hands its trainer: `harness.instrument.reward_calls`,
under the name targets have imported it by."""

from harness.instrument.reward_calls import RewardTap, as_scores

__all__ = ["RewardTap", "as_scores"]
