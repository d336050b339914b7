"""The PPO contract as data (docs/metrics.md): which metric pools what, over which mask, from which site.

Every other PPO module reads these tables; none types a metric name of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from harness.instrument.records import LogProbCall, MaskedMeanCall, Record

Mask = Literal["R", "V"]
"""R: response tokens (t <= sequence_length); V: value tokens (one more position)."""


@dataclass(frozen=True)
class PooledMean:
    """A token mean pooled over every micro-batch of an update: sum of per-token values over `mask` / its count.

    `source` is a masked_mean site role (the per-token values the trainer handed to it,
    times `scale`), or `log_ratio` (a function `of_log_ratio` of logp_new - logp_old), or
    `entropy` (of the micro-batch's logits, as the spy recorded it).
    """

    name: str
    mask: Mask
    source: str
    scale: float = 1.0
    of_log_ratio: Literal["half_square", "exp"] | None = None


POOLED_MEANS = (
    PooledMean("loss/policy_avg", "R", "pg_loss"),
    PooledMean("policy/clipfrac_avg", "R", "pg_clipfrac"),
    PooledMean("loss/value_avg", "V", "vf_loss", scale=0.5),
    PooledMean("val/clipfrac_avg", "V", "vf_clipfrac"),
    PooledMean("policy/approxkl_avg", "R", "log_ratio", of_log_ratio="half_square"),
    PooledMean("policy/entropy_avg", "R", "entropy"),
    PooledMean("val/ratio", "R", "log_ratio", of_log_ratio="exp"),
)
RATIO_VAR = "val/ratio_var"
"""Unbiased variance of the per-micro-batch masked means of the ratio (micro-batches with |R| > 0)."""
RATIO_VAR_OF = "val/ratio"
"""The pooled mean whose per-micro-batch means val/ratio_var is the variance of."""

POOLED_NAMES = tuple(m.name for m in POOLED_MEANS)
"""The seven pooled means (partition invariance compares these)."""
POOLED_STATS = POOLED_NAMES + (RATIO_VAR,)
"""Everything pooled over micro-batches: the seven means and val/ratio_var."""
ROLLOUT = (
    "objective/kl",
    "objective/entropy",
    "objective/non_score_reward",
    "objective/scores",
    "objective/rlhf_reward",
)
"""Per-sample sums over R, averaged over every rollout sample."""
NAMES = POOLED_STATS + ROLLOUT
"""Every metric the contract defines (versions.py hands them to its `Contract`)."""
SCORED = ("objective/scores", "objective/rlhf_reward")
"""Rollout objectives that need the scores handed to the trainer."""
LR0_IDENTITIES = {"val/ratio": 1.0, RATIO_VAR: 0.0, "policy/approxkl_avg": 0.0, "policy/clipfrac_avg": 0.0}
"""What any correct trainer logs at learning rate 0, whatever the split."""

LOGPROB_ROLES = ("logprob", "ref_logprob", "new_logprobs")
"""selective_log_softmax sites: rollout policy, rollout reference, training micro-batch (starts it)."""
MICRO_BATCH_ROLES = tuple(m.source for m in POOLED_MEANS if m.source not in ("log_ratio", "entropy"))
"""masked_mean sites that belong to the micro-batch started by the last `new_logprobs`."""
ROLE_MASK: dict[str, Mask] = {m.source: m.mask for m in POOLED_MEANS if m.source in MICRO_BATCH_ROLES}
"""The mask the trainer must pass to masked_mean at each micro-batch site."""


@dataclass(frozen=True)
class SiteMap:
    """The trainer's assigned name for each call-site role (the defaults fit reference_ppo and TRL)."""

    logprob: str = "logprob"
    ref_logprob: str = "ref_logprob"
    new_logprobs: str = "new_logprobs"
    pg_loss: str = "pg_loss"
    pg_clipfrac: str = "pg_clipfrac"
    vf_loss: str = "vf_loss"
    vf_clipfrac: str = "vf_clipfrac"
    whiten: str = "masked_whiten"
    """The trainer's whitening function: its masked_mean call assigned to `mean` records the raw values."""

    def role(self, record: Record) -> str | None:
        """Which role ('logprob', 'pg_loss', ...) `record` plays, or None for other sites."""
        if isinstance(record, LogProbCall):
            roles = LOGPROB_ROLES
        elif isinstance(record, MaskedMeanCall):
            roles = MICRO_BATCH_ROLES
        else:
            return None
        return next((role for role in roles if getattr(self, role) == record.site.name), None)

    def whitens(self, record: Record) -> bool:
        """True for the masked_mean call (assigned to `mean`) inside the trainer's whitening function."""
        return (
            isinstance(record, MaskedMeanCall)
            and record.site.name == "mean"
            and record.site.function.split(".")[-1] == self.whiten
        )


assert {f.name for f in fields(SiteMap)} == {*LOGPROB_ROLES, *MICRO_BATCH_ROLES, "whiten"}, "SiteMap names every role"
