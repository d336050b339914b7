"""What a GRPO target wraps around the reward functions it hands its trainer: `harness.instrument.reward_calls`,
under the name targets imported it by before 0.2.0.

Deprecated since 0.3.0: importing it warns once (a DeprecationWarning naming `harness.instrument.reward_calls`).
It keeps working; it is removed only in a release whose CHANGELOG.md says so.
"""

import warnings

from harness.instrument.reward_calls import RewardTap, as_scores

__all__ = ["RewardTap", "as_scores"]

DEPRECATED = (
    "harness.algorithms.grpo.reward_calls is deprecated since ppo-stats-harness 0.3.0: import RewardTap and "
    "as_scores from harness.instrument.reward_calls; it keeps working until a release whose CHANGELOG.md removes it"
)



# stacklevel 2: the statement that imported it (warnings skips the import machinery's frames)
warnings.warn(DEPRECATED, DeprecationWarning, stacklevel=2)
