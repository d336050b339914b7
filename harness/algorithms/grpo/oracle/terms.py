"""The token terms of the GRPO oracle: each micro-batch's per-token ratio, clip flags, k3 and loss, float64, from its
loss record and the formulas (docs/grpo-metrics.md, sections 2 and 4), the loss as the target's definitions fix it
(declared.py). expect.py pools them over an interval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.instrument.loss import LossRecord
from harness.oracle.precision import coarsest
from harness.tolerances import margin_of

from ..definitions import POSITIVE_ADVANTAGE, UPDATE
from .declared import dual_clipped, k3, kl_weighted
from .entropy_mask import EntropyMask, entropy_masks, policy_kept
from .off_policy_mask import policy_mask
from .settings import Settings, log_ratios
from .vespo import vespo_operands, vespo_phi

# A clip flag whose ratio lies within CLIP_MARGIN (harness/tolerances.py) of its bound is uncertain: the tolerance
# of a clip metric grows by the share of flags that are. The margin is that of the dtype the trainer held the
# log-probs in (`LossRecord.held`), the ratio being theirs, else the run's.


@dataclass(frozen=True)
class TokenTerms:
    """Per-token values of one micro-batch, float64, from its record and the formulas."""

    mask: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    kl: torch.Tensor | None
    loss: torch.Tensor
    entropy: torch.Tensor | None
    uncertain: torch.Tensor
    """1.0 where a clip flag could round either way in the trainer's dtype (the ratio within the margin of a bound)."""
    cispo: torch.Tensor | None = None
    """cispo's flag r > epsilon_high where A > 0, or at every token (cispo_clip_population; cispo only)."""
    phi: torch.Tensor | None = None
    """(B,) vespo's sequence weights (vespo only)."""
    ratio: torch.Tensor | None = None
    """The importance ratio r (uncapped)."""
    held: dict[str, str | None] = dataclasses.field(default_factory=dict)
    """The dtype the trainer held the inputs of each quantity in ('entropy', 'kl', 'loss', 'flags'), read from its
    record (`LossRecord.held_dtype`); None where the record does not say."""
    operands: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    """Per token, the size of the operands the trainer's formula for 'kl' and 'loss' rounds (oracle/precision.py)."""
    sequence_level: bool = False
    """The ratio and the clip flags are one per completion (every token of a row carries its row's): the flags'
    means pool over completions, every row counted, an empty one included (as TRL's GRPOTrainer counts them)."""
    flips: torch.Tensor | None = None
    """Under an entropy mask or the off-policy sequence mask: |policy term| at the tokens within the rounding margin
    of its threshold (0 elsewhere), which the trainer may or may not have kept (entropy_mask.py, off_policy_mask.py);
    None without a mask."""
    window: int = 0
    """The optimizer step (accumulation window) of its micro-batch, 0-based over the run (`LossRecord.window`)."""

    @property
    def region(self) -> torch.Tensor:
        """The region flag: clipped low or high."""
        return torch.maximum(self.low, self.high)

    def per_completion(self, values: torch.Tensor) -> torch.Tensor:
        """(B,) each completion's masked mean of `values` (0 for an empty completion: its count is clamped to 1)."""
        return (values * self.mask).sum(dim=1) / self.mask.sum(dim=1).clamp(min=1)


def token_terms(record: LossRecord, s: Settings, entropy: EntropyMask | None = None) -> TokenTerms:
    """Ratio, flags, k3 and the per-token loss of one micro-batch: l_t = -min(r A, clip(r) A) + beta kl for the
    clipped loss types, cispo's -min(r, epsilon_high) A logp, sapo's -sigmoid(tau (r - 1)) 4 / tau A, vespo's
    -phi A logp (docs/grpo-metrics.md, section 4); kl, the dual clip and whether l_t holds beta kl as the target's
    definitions fix them (declared.py); the policy term under the entropy mask (`entropy`, its micro-batch's on
    every rank; the record's own when not given) where top_entropy_quantile is below 1, and under the off-policy
    sequence mask where off_policy_mask_threshold is set (off_policy_mask.py)."""
    mask = record.completion_mask.bool()
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    adv = record.advantages.double().unsqueeze(1)
    held = held_dtypes(record, s)
    margin = margin_of(held["flags"] or s.dtype)
    # a log-ratio of exactly 0 (the old log-probs the new ones, as on policy) is a ratio of exactly 1 in every dtype:
    # its flags are decided, not within rounding of a bound
    log_ratio = log_ratios(logps, old, mask, s)
    inexact = log_ratio != 0
    ratio = torch.exp(log_ratio)
    raw = ratio
    ratio_ops = ratio * (1 + log_ratio.abs())  # exp's rounding, and the subtraction's carried through it
    zeros = torch.zeros_like(ratio)
    low, high, uncertain, cispo, phi = zeros, zeros, zeros, None, None
    if s.loss_type == "cispo":
        loss = -ratio.clamp(max=s.epsilon_high) * adv * logps
        loss_ops = 2 * adv.abs() * logps.abs() * ratio_ops
        counted = adv > 0 if s.cispo_clip_population == POSITIVE_ADVANTAGE else torch.ones_like(adv, dtype=torch.bool)
        cispo = ((ratio > s.epsilon_high) & counted).double()
        uncertain = (((ratio - s.epsilon_high).abs() <= margin * s.epsilon_high) & counted & inexact).double()
    elif s.loss_type == "sapo":
        tau = torch.where(adv > 0, s.sapo_temperature_pos, s.sapo_temperature_neg)
        loss = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv
        loss_ops = adv.abs() * (ratio_ops + 4 / tau)
    elif s.loss_type == "vespo":
        weight = vespo_phi(logps - old, mask.double(), adv, s)
        loss = -weight * adv * logps
        phi = weight.squeeze(1)
        phi_ops = vespo_operands(weight, logps - old, mask.double(), adv, s)
        loss_ops = adv.abs() * (logps.abs() + 1) * phi_ops
    else:
        clipped = ratio.clamp(1 - s.epsilon_low, 1 + s.epsilon_high)
        if s.delta is not None:
            ratio = ratio.clamp(max=s.delta)
        loss = dual_clipped(-torch.minimum(ratio * adv, clipped * adv), adv, s)
        loss_ops = 2 * adv.abs() * ratio_ops
        low = ((ratio < 1 - s.epsilon_low) & (adv < 0)).double()
        high = ((ratio > 1 + s.epsilon_high) & (adv > 0)).double()
        lower, upper = 1 - s.epsilon_low, 1 + s.epsilon_high
        near_low = ((ratio - lower).abs() <= margin * lower) & (adv < 0)
        near_high = ((ratio - upper).abs() <= margin * upper) & (adv > 0)
        uncertain = ((near_low | near_high) & inexact).double()
    policy = policy_mask(record, s, entropy)
    flips = None if policy is None else loss.abs() * policy.uncertain
    (loss,) = policy_kept(policy, loss)
    kl = None
    operands = {"loss": loss_ops}
    if phi is not None:
        operands["phi"] = phi_ops.squeeze(1)
    if s.beta != 0 and record.ref_logps is not None:
        gap = record.ref_logps.double() - logps
        kl = k3(gap, s)
        kl_ops = torch.exp(gap) + gap.abs() + 1  # k3 cancels: its rounding is that of its operands, not of k3
        if kl_weighted(s):
            kl = kl * ratio
            kl_ops = kl_ops * ratio + kl.abs() * ratio_ops
        operands["kl"] = kl_ops
        if s.policy_loss_includes_kl:
            loss = loss + s.beta * kl
            operands["loss"] = loss_ops + abs(s.beta) * kl_ops
    entropies = entropies_of(record, s)
    return TokenTerms(mask, low, high, kl, loss, entropies, uncertain, cispo, phi, raw, held, operands,
                      s.sequence_level, flips, int(record.window))  # fmt: skip


def entropy_field(s: Settings) -> str:
    """The record field holding the entropies the target's logged entropy pools (entropy_pass, definitions.py): the
    update's own ('entropies') or those of the pass before it ('old_entropies')."""
    return "entropies" if s.entropy_pass == UPDATE else "old_entropies"


def entropies_of(record: LossRecord, s: Settings) -> torch.Tensor | None:
    """(B, T) float64 the entropies of the pass `s.entropy_pass` names, None where the record holds none."""
    values = getattr(record, entropy_field(s))
    return None if values is None else values.double()


def held_dtypes(record: LossRecord, s: Settings) -> dict[str, str | None]:
    """The dtype the trainer held the inputs of each quantity in (the coarsest of them), from the record."""
    held = lambda *names: coarsest(*(record.held_dtype(n) for n in names if getattr(record, n) is not None))  # noqa: E731
    flags = held("logps", "old_logps")
    kl = held("logps", "ref_logps") if s.beta != 0 else None
    return {"entropy": held(entropy_field(s)), "kl": kl, "flags": flags,
            "loss": coarsest(flags, kl, held("advantages"))}  # fmt: skip


def terms_of(records: Sequence[LossRecord], s: Settings) -> list[TokenTerms]:
    """The token terms of each record, each under the entropy mask of its micro-batch on every rank (entropy_mask.py;
    none where top_entropy_quantile is 1)."""
    return [token_terms(r, s, mask) for r, mask in zip(records, entropy_masks(records, s.top_entropy_quantile))]
