"""The derivative of a GRPO per-token loss at its new log-prob, per loss type (gradients.py weighs it by the
window's normaliser and compares it with what the trainer's backward pass delivered).

Every token's per-token loss is l_t = -min(r'_t A, clip(r_t) A) + beta kl_t (docs/grpo-metrics.md,
section 4), r_t = exp(logp_t - logp_old,t), r' = min(r, delta) when `delta` is set, and
kl_t = k3_t (times r'_t when the KL is bias-corrected). Its derivative at logp_t:

    policy term   -A r_t   where the unclipped branch is the smaller (its r' not capped by delta), or
                           where the clipped one is and r_t lies inside [1 - epsilon_low, 1 + epsilon_high]
                           (both branches are one function there); 0 where the clipped branch is the
                           smaller outside that range (it is flat in r)
    KL term       beta (1 - exp(ref - logp))              uncorrected
                  beta ((1 - exp(ref - logp)) r' + k3 r')  bias-corrected (the second term where r <= delta)

for the loss types with a hard clip (grpo, bnpo, dr_grpo, dapo, luspo). The others have no clip and
correct the KL by the uncapped r:

    cispo         -min(r, epsilon_high) A            (the capped weight carries no gradient)
    sapo          -4 sigma(x) (1 - sigma(x)) r A     x = tau (r - 1), tau by the sign of A
    vespo         -phi(w) A                          phi of the sequence weight w, no gradient
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.errors import NotRecomputable
from harness.instrument.loss import LossRecord

from ..spec import CLIPPED_LOSS_TYPES
from .expect import Settings
from .vespo import vespo_phi

SATURATED = 1e4
"""sapo's tokens whose gate sigma(x) is within SATURATED * the dtype's clip margin of 1 (at most 0.1) are not
compared: the trainer's 1 - sigma rounds to a relative error of the dtype's epsilon over 1 - sigma (float32, at
1 - sigma = 1e-3: about 6e-5), and the gradient 4 sigma (1 - sigma) r A with it (measured: a float32 gap of 4.7e-6
at such a token, seed 0; below the cut the gaps are those of the clipped loss types)."""


@dataclass(frozen=True)
class TokenGradient:
    """d l_t / d logp_t of one micro-batch (float64), and where the trainer's rounding may pick either branch."""

    value: torch.Tensor
    uncertain: torch.Tensor
    clipped: torch.Tensor
    """Masked tokens whose policy-term gradient the clip zeroes (the clipped branch is the smaller, r outside)."""
    capped: torch.Tensor | None = None
    """Masked tokens whose policy-term gradient delta's cap zeroes (the unclipped branch is the smaller, r > delta);
    None for the loss types without a hard clip."""


def soft_gradient(record: LossRecord, s: Settings) -> TokenGradient:
    """d l_t / d logp_t of the loss types without a hard clip, their importance weight's correction of the KL
    uncapped: cispo -min(r, epsilon_high) A (the weight carries no gradient), sapo -4 sigma(x) (1 - sigma(x)) r A
    with x = tau (r - 1), vespo -phi A (phi carries none)."""
    mask = record.completion_mask.bool()
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    adv = record.advantages.double().unsqueeze(1)
    ratio = torch.exp(logps - old)
    uncertain = torch.zeros_like(mask)
    if s.loss_type == "cispo":
        value = -ratio.clamp(max=s.epsilon_high) * adv
    elif s.loss_type == "sapo":
        tau = torch.where(adv > 0, s.sapo_temperature_pos, s.sapo_temperature_neg)
        gate = torch.sigmoid(tau * (ratio - 1))
        value = -4 * gate * (1 - gate) * ratio * adv
        uncertain = mask & (1 - gate < min(SATURATED * s.margin, 0.1))
    else:
        value = -vespo_phi(logps - old, mask.double(), adv, s) * adv
    if s.beta != 0:
        value = value + s.beta * kl_gradient(record, logps, ratio, ratio, s)
    return TokenGradient(value, uncertain, torch.zeros_like(mask))


def kl_gradient(record: LossRecord, logps: torch.Tensor, capped: torch.Tensor, d_capped: torch.Tensor,
                s: Settings) -> torch.Tensor:  # fmt: skip
    """d kl_t / d logp_t: 1 - exp(ref - logp), times the correcting ratio plus k3 times its derivative when
    bias-corrected."""
    if record.ref_logps is None:
        raise NotRecomputable(f"beta={s.beta} but the loss record holds no reference log-probs")
    gap = record.ref_logps.double() - logps
    d_kl = 1 - torch.exp(gap)
    if s.use_bias_correction_kl:
        d_kl = d_kl * capped + (torch.exp(gap) - gap - 1) * d_capped
    return d_kl


def token_gradient(record: LossRecord, s: Settings) -> TokenGradient:
    """The derivative of the per-token loss at the new log-prob, per token: the formula of the module docstring."""
    if s.loss_type not in CLIPPED_LOSS_TYPES:
        return soft_gradient(record, s)
    mask = record.completion_mask.bool()
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    adv = record.advantages.double().unsqueeze(1)
    ratio = torch.exp(logps - old)
    lower, upper = 1 - s.epsilon_low, 1 + s.epsilon_high
    capped, d_capped = ratio, ratio
    if s.delta is not None:
        capped, d_capped = ratio.clamp(max=s.delta), torch.where(ratio <= s.delta, ratio, torch.zeros_like(ratio))
    clipped = ratio.clamp(lower, upper)
    d_clipped = torch.where((ratio >= lower) & (ratio <= upper), ratio, torch.zeros_like(ratio))
    unclipped_term, clipped_term = capped * adv, clipped * adv
    tie = (d_capped + d_clipped) / 2  # torch.min splits a tie's gradient; both are r there
    d_ratio = torch.where(unclipped_term < clipped_term, d_capped,
                          torch.where(clipped_term < unclipped_term, d_clipped, tie))  # fmt: skip
    value = -adv * d_ratio
    if s.beta != 0:
        value = value + s.beta * kl_gradient(record, logps, capped, d_capped, s)
    margin = s.margin
    near = ((ratio - lower).abs() <= margin * lower) & (adv < 0)
    near |= ((ratio - upper).abs() <= margin * upper) & (adv > 0)
    if s.delta is not None:
        near |= (ratio - s.delta).abs() <= margin * s.delta
    zeroed = mask & (clipped_term < unclipped_term) & (d_clipped == 0) & (adv != 0)
    capped_away = mask & (unclipped_term < clipped_term) & (d_capped == 0) & (adv != 0)
    return TokenGradient(value, near & mask, zeroed, capped_away)
