"""The GRPO metric contract (docs/grpo-metrics.md) as data: the logged names and how each is pooled.

Token-pooled means are one sum over one count over the interval's micro-batches (every
rank); the extremes are true extremes over every (completion, micro-batch) pair that has
a token; `policy_loss` is the loss type's own objective over the whole interval; the
per-completion statistics are over each completion once. Nothing here imports torch.
"""

from __future__ import annotations

from .spec import CLIPPED_LOSS_TYPES

ENTROPY = "entropy"
CLIP_MEANS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")
"""Logged by the loss types with a hard clip (spec.CLIPPED_LOSS_TYPES)."""
CISPO_CLIP = "cispo_clip_ratio"
"""cispo's own clip flag, r > epsilon_high where A > 0, token-pooled."""
TOKEN_POOLED = (ENTROPY, *CLIP_MEANS, CISPO_CLIP)
"""Token means over the interval: sum over M of sum(mask * x) / sum over M of sum(mask)."""
PHI_MEAN = "vespo/phi_seq_mean"
"""vespo's sequence weight, a mean over the interval's (completion, micro-batch) rows, empty ones included."""
KL = "kl"
"""Token-pooled too, logged only when beta != 0: k3, times the ratio when the KL is bias-corrected."""
EXTREMES = ("clip_ratio/low_min", "clip_ratio/high_max")
"""The minimum (maximum) over the interval's completions with a token of their masked mean of the low (high) flag."""
POLICY_LOSS = "policy_loss"
"""The loss type's objective over the whole interval, never divided by the accumulation steps."""
OPTIONAL = (POLICY_LOSS,)
"""The contract's metrics a trainer may leave unlogged (TRL logs `policy_loss` only with an entropy bonus), unless
its target declares it logs them (`factory.optional_metrics`, harness/targets/__init__.py)."""
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
TERMINATED_LENGTHS = (
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
)
"""Over the completions that ended with the stop token (lengths.py)."""
PER_REWARD_FUNCTION = ("rewards/*/mean", "rewards/*/std")
"""Each reward function's mean and std of its scores, `*` its name (the contract's `rewards/{name}/mean`)."""
NAMES = (*TOKEN_POOLED, KL, *EXTREMES, PHI_MEAN, POLICY_LOSS, *PER_COMPLETION, *TERMINATED_LENGTHS,
         *PER_REWARD_FUNCTION)  # fmt: skip
"""Every metric the contract defines (versions.py hands them to its `Contract`)."""
LR0_IDENTITIES = {"clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/region_mean": 0.0,
                  "clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.0}  # fmt: skip
"""At learning rate 0 every ratio is 1 and no token is clipped."""


def pooled_names(beta: float, loss_type: str) -> tuple[str, ...]:
    """The metrics the oracle recomputes from the loss records of a run with KL weight `beta` and `loss_type`:
    the clip metrics for the clipped loss types, cispo's and vespo's own for those."""
    own: tuple[str, ...] = ()
    if loss_type in CLIPPED_LOSS_TYPES:
        own = (*CLIP_MEANS, *EXTREMES)
    elif loss_type == "cispo":
        own = (CISPO_CLIP,)
    elif loss_type == "vespo":
        own = (PHI_MEAN,)
    return (ENTROPY, *((KL,) if beta != 0 else ()), *own, POLICY_LOSS)


def partition_names(beta: float, loss_type: str) -> tuple[str, ...]:
    """The metrics that must not depend on how one generation batch is cut, at learning rate 0 (bnpo's
    `policy_loss`, a mean of micro-batch means by its definition, does)."""
    names = pooled_names(beta, loss_type)
    if loss_type == "bnpo":
        names = tuple(n for n in names if n != POLICY_LOSS)
    return (*names, *PER_COMPLETION)


def lr0_identities(loss_type: str) -> dict[str, float]:
    """What a loss type logs at learning rate 0, where every ratio is 1: no clip flag of the clipped types, and
    vespo's weight phi(1) = 1. (cispo's flag r > epsilon_high is not fixed: it is every A > 0 token when
    epsilon_high < 1.)"""
    if loss_type in CLIPPED_LOSS_TYPES:
        return dict(LR0_IDENTITIES)
    return {PHI_MEAN: 1.0} if loss_type == "vespo" else {}


LOSS_NORMALISATION = {
    "grpo": "mean over completions of each completion's token mean",
    "bnpo": "mean over micro-batches of each micro-batch's token mean (TRL's local batch)",
    "dr_grpo": "sum of per-token losses / (completions * max_completion_length)",
    "dapo": "sum of per-token losses / tokens (per window: the generation batch's tokens times the window's share)",
    "cispo": "as dapo",
    "sapo": "as grpo",
    "luspo": "sum of per-token losses / completions (each completion weighted by its length)",
    "vespo": "as dapo",
}
"""How each loss type turns per-token losses into `policy_loss` over an interval (docs/grpo-metrics.md, s. 4)."""
