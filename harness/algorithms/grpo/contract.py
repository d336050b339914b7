"""The GRPO metric contract (docs/grpo-metrics.md) as data: the logged names and how each is pooled.

Token-pooled means are one sum over one count over the interval's micro-batches (every
rank); the extremes are true extremes over every (completion, micro-batch) pair that has
a token; `policy_loss` is the loss type's own objective over the whole interval; the
per-completion statistics are over each completion once. Nothing here imports torch.
"""

from __future__ import annotations

TOKEN_POOLED = ("entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")
"""Token means over the interval: sum over M of sum(mask * x) / sum over M of sum(mask)."""
KL = "kl"
"""Token-pooled too, logged only when beta != 0: k3, times the ratio when the KL is bias-corrected."""
EXTREMES = ("clip_ratio/low_min", "clip_ratio/high_max")
"""The minimum (maximum) over the interval's completions with a token of their masked mean of the low (high) flag."""
POLICY_LOSS = "policy_loss"
"""The loss type's objective over the whole interval, never divided by the accumulation steps."""
PER_COMPLETION = (
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
)
"""Over G, each completion once: the partition check holds them to one value per generation batch however it is
cut; `reward_stats` recomputes the reward ones from the scores recorded at the reward functions (rewards.py), and
`completion_lengths` the length ones, the terminated lengths too, from the records' masks and ids (lengths.py)."""
LR0_IDENTITIES = {"clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/region_mean": 0.0,
                  "clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.0}  # fmt: skip
"""At learning rate 0 every ratio is 1 and no token is clipped."""


def pooled_names(beta: float) -> tuple[str, ...]:
    """The metrics the oracle recomputes from the loss records of a run with KL weight `beta`."""
    return (*TOKEN_POOLED, *((KL,) if beta != 0 else ()), *EXTREMES, POLICY_LOSS)


def partition_names(beta: float) -> tuple[str, ...]:
    """The metrics that must not depend on how one generation batch is cut, at learning rate 0."""
    return (*pooled_names(beta), *PER_COMPLETION)


LOSS_NORMALISATION = {
    "grpo": "mean over completions of each completion's token mean",
    "bnpo": "sum of per-token losses / tokens",
    "dr_grpo": "sum of per-token losses / (completions * max_completion_length)",
    "dapo": "sum of per-token losses / tokens (per window: the generation batch's tokens times the window's share)",
}
"""How each loss type turns per-token losses into `policy_loss` over an interval (docs/grpo-metrics.md, s. 4)."""
