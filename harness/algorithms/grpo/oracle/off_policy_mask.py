"""TRL's off-policy sequence mask of the policy loss (`off_policy_mask_threshold` delta, DeepSeek-V3.2's "off-policy
sequence masking", docs/grpo-metrics.md section 4), recomputed in float64 from the recorded log-probs, advantages
and masks.

A completion keeps its policy term unless its advantage is negative and its KL estimate, the mean over its mask of
old_logp - logp (the policy that drew it against the current one, at the drawn tokens; 0 for an empty completion,
its count clamped to 1), exceeds delta. The KL term is added after the mask, on every token, and the entropy bonus
is not masked (TRL's `_compute_loss`). Without stored old log-probs (on policy) the estimate is exactly 0, so every
completion keeps its term.

A completion whose estimate lies within the rounding margin of delta may fall on either side in the trainer: the
trainer sums the log-ratios in the dtype it held the log-probs in, so the margin is that dtype's (CLIP_MARGIN) times
delta plus the mean |old_logp - logp| of the completion (the size of what it summed). Such a completion is
uncertain: its tokens' gradients are not compared, and its policy term may or may not be in the pooled
`policy_loss`.
"""

from __future__ import annotations

import torch

from harness.instrument.loss import LossRecord
from harness.oracle.precision import coarsest
from harness.tolerances import margin_of

from .entropy_mask import EntropyMask, of_record
from .settings import Settings


def sequence_kl(record: LossRecord) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) each completion's mean of old_logp - logp over its mask, and (B,) its mean |old_logp - logp| (both 0
    without old log-probs or for an empty completion), float64."""
    mask = record.completion_mask.double()
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    count = mask.sum(dim=1).clamp(min=1)
    gap = (old - logps) * mask
    return gap.sum(dim=1) / count, gap.abs().sum(dim=1) / count


def off_policy_mask(record: LossRecord, s: Settings) -> EntropyMask | None:
    """The tokens of `record` whose policy term the off-policy sequence mask keeps (every token of a kept completion)
    and those of the completions within rounding of delta; None when `s.off_policy_mask_threshold` is None. The
    result has the entropy mask's shape (`threshold` delta), so that the two compose (`both`)."""
    delta = s.off_policy_mask_threshold
    if delta is None:
        return None
    mask = record.completion_mask.bool()
    kl, size = sequence_kl(record)
    negative = record.advantages.double() < 0
    margin = margin_of(coarsest(record.held_dtype("logps"), record.held_dtype("old_logps"), s.dtype))
    kept = ~negative | (kl <= delta)
    near = negative & ((kl - delta).abs() <= margin * (delta + size)) & (size > 0)
    return EntropyMask(mask & kept.unsqueeze(1), mask & near.unsqueeze(1), delta)


def both(entropy: EntropyMask | None, sequence: EntropyMask | None) -> EntropyMask | None:
    """One mask of the policy term from the entropy mask and the off-policy sequence mask: a token kept by both, and
    uncertain where either is; either alone where the other is None."""
    if entropy is None or sequence is None:
        return entropy if sequence is None else sequence
    return EntropyMask(entropy.kept & sequence.kept, entropy.uncertain | sequence.uncertain, entropy.threshold)


def policy_mask(record: LossRecord, s: Settings, entropy: EntropyMask | None = None) -> EntropyMask | None:
    """The mask of `record`'s policy term: its entropy mask (`entropy`, its micro-batch's on every rank, else the
    record's own where top_entropy_quantile is below 1; entropy_mask.py) with its off-policy sequence mask; None where
    neither is set."""
    return both(of_record(record, s.top_entropy_quantile, entropy), off_policy_mask(record, s))


def dropped(record: LossRecord, s: Settings) -> tuple[int, int]:
    """(dropped, kept off policy): completions of negative advantage and non-empty mask that the mask drops, and those
    it keeps at a KL estimate above 0 (which a threshold of 0 would drop), none within rounding of delta ((0, 0)
    without the mask)."""
    sequence = off_policy_mask(record, s)
    if sequence is None:
        return 0, 0
    rows = record.completion_mask.bool().any(dim=1) & (record.advantages.double() < 0)
    rows &= ~sequence.uncertain.any(dim=1)
    kl, _ = sequence_kl(record)
    kept = sequence.kept.any(dim=1)
    return int((rows & ~kept).sum()), int((rows & kept & (kl > 0)).sum())
