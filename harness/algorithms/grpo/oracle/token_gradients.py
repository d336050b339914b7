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

and, where the target declares them (declared.py), 0 for the policy term where A < 0 and r' > dual_clip_ratio, the
KL's 1 - exp(ref - logp) 0 where k3 is above kl_clamp (k3 the clamp's value), and no correcting ratio where
kl_importance_weighting is 'never'. The tokens within the dtype's rounding margin of either bound are uncertain.
With top_entropy_quantile below 1 the policy term is 0 at every token the entropy mask leaves out, the KL term kept
(entropy_mask.py), and with off_policy_mask_threshold set at every token of a completion the off-policy sequence mask
drops (off_policy_mask.py); the tokens within the rounding margin of either mask's threshold are uncertain too.

for the loss types with a hard clip (grpo, bnpo, dr_grpo, dapo, luspo). The others have no clip and
correct the KL by the uncapped r:

    cispo         -min(r, epsilon_high) A            (the capped weight carries no gradient)
    sapo          -4 sigma(x) (1 - sigma(x)) r A     x = tau (r - 1), tau by the sign of A
    vespo         -phi(w) A                          phi of the sequence weight w, no gradient

At importance_sampling_level 'sequence' (GSPO) r_t is the completion's ratio s = exp(m), m the mean of its tokens'
log-ratios over its mask (n tokens), on every token of it, so dm/dlogp_u = 1/n for each token u of the completion:
a token's gradient is its own direct terms (the KL's 1 - exp(ref - logp), times r' when corrected; cispo's weight)
plus 1/n times the sum, over the completion's tokens t, of the window weight of t times d l_t / dm (the policy
term's derivative above with s for r, and beta k3_t r' where the KL is corrected). `TokenGradient.shared` holds
d l_t / dm; gradients.py sums it over the completion.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.errors import NotRecomputable
from harness.instrument.loss import LossRecord

from ..spec import CLIPPED_LOSS_TYPES
from .declared import beyond_dual_clip, held_by_clamp, k3, kl_weighted, near_clamp, near_dual_clip
from .entropy_mask import EntropyMask, of_record, policy_kept
from .expect import Settings, log_ratios
from .off_policy_mask import policy_mask
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
    """Masked tokens whose policy-term gradient the clip zeroes (the clipped branch is the smaller, r outside); under
    an entropy mask, of the tokens it keeps."""
    capped: torch.Tensor | None = None
    """Masked tokens whose policy-term gradient delta's cap zeroes (the unclipped branch is the smaller, r > delta);
    None for the loss types without a hard clip."""
    shared: torch.Tensor | None = None
    """At sequence level: d l_t / dm per token, m its completion's mean log-ratio, which reaches every token of the
    completion through m (gradients.py spreads the window-weighted sum over the completion); None at token level,
    where `value` is all of d l_t / d logp_t."""
    dual: torch.Tensor | None = None
    """Masked tokens whose policy-term gradient the declared dual clip zeroes (A < 0, r' above dual_clip_ratio);
    None without one."""
    entropy: EntropyMask | None = None
    """The entropy mask the policy term took (None: top_entropy_quantile 1, no mask)."""


def split(value: torch.Tensor, through_ratio: torch.Tensor, s: Settings) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(value, shared) of a TokenGradient: `value` the terms through logp_t alone, `through_ratio` those through the
    ratio; at token level the ratio's log is logp_t's own, so the two add up, at sequence level the second is
    `shared`."""
    if s.sequence_level:
        return value, through_ratio
    return value + through_ratio, None


def soft_gradient(record: LossRecord, s: Settings, entropy: EntropyMask | None = None) -> TokenGradient:
    """d l_t / d logp_t of the loss types without a hard clip, their importance weight's correction of the KL
    uncapped: cispo -min(r, epsilon_high) A (the weight carries no gradient), sapo -4 sigma(x) (1 - sigma(x)) r A
    with x = tau (r - 1), vespo -phi A (phi carries none); the policy term under `entropy`'s mask."""
    mask = record.completion_mask.bool()
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    adv = record.advantages.double().unsqueeze(1)
    ratio = torch.exp(log_ratios(logps, old, mask, s))
    uncertain = torch.zeros_like(mask)
    direct, through_ratio = torch.zeros_like(ratio), torch.zeros_like(ratio)
    if s.loss_type == "cispo":
        direct = -ratio.clamp(max=s.epsilon_high) * adv
    elif s.loss_type == "sapo":
        tau = torch.where(adv > 0, s.sapo_temperature_pos, s.sapo_temperature_neg)
        gate = torch.sigmoid(tau * (ratio - 1))
        through_ratio = -4 * gate * (1 - gate) * ratio * adv
        uncertain = mask & (1 - gate < min(SATURATED * s.margin, 0.1))
    else:
        direct = -vespo_phi(logps - old, mask.double(), adv, s) * adv
    policy = policy_mask(record, s, entropy)
    direct, through_ratio = policy_kept(policy, direct, through_ratio)
    if policy is not None:
        uncertain = uncertain | policy.uncertain
    if s.beta != 0:
        kl_direct, kl_through = kl_parts(record, logps, ratio, ratio, s)
        direct, through_ratio = direct + s.beta * kl_direct, through_ratio + s.beta * kl_through
        uncertain = uncertain | (mask & kl_uncertain(record, logps, s))
    value, shared = split(direct, through_ratio, s)
    return TokenGradient(value, uncertain, torch.zeros_like(mask), shared=shared, entropy=entropy)


def kl_parts(record: LossRecord, logps: torch.Tensor, capped: torch.Tensor, d_capped: torch.Tensor,
             s: Settings, reverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """d kl_t / d logp_t in two parts: through logp_t itself, 1 - exp(ref - logp) (0 where the declared kl_clamp
    holds k3; times the correcting ratio when the KL is weighted: declared.py), and through the ratio, k3 times the
    correcting ratio's derivative at its log (0 unweighted). `reverse`: of k3 the wrong way round, exp(logp - ref) -
    (logp - ref) - 1 (wrong/gradient_formulas.py)."""
    if record.ref_logps is None:
        raise NotRecomputable(f"beta={s.beta} but the loss record holds no reference log-probs")
    gap = record.ref_logps.double() - logps
    if reverse:
        gap = -gap
    d_kl = 1 - torch.exp(gap)
    if reverse:
        d_kl = -d_kl
    if s.kl_clamp is not None:
        d_kl = torch.where(held_by_clamp(gap, s), torch.zeros_like(d_kl), d_kl)
    if not kl_weighted(s):
        return d_kl, torch.zeros_like(d_kl)
    return d_kl * capped, k3(gap, s) * d_capped


def kl_uncertain(record: LossRecord, logps: torch.Tensor, s: Settings) -> torch.Tensor:
    """Where the trainer's rounding may put k3 on either side of the declared kl_clamp (nowhere without one)."""
    return near_clamp(record.ref_logps.double() - logps, s, s.margin)


def kl_gradient(record: LossRecord, logps: torch.Tensor, capped: torch.Tensor, d_capped: torch.Tensor,
                s: Settings, reverse: bool = False) -> torch.Tensor:  # fmt: skip
    """d kl_t / d logp_t at token level (the ratio's log is logp_t's own): kl_parts' two parts added."""
    direct, through_ratio = kl_parts(record, logps, capped, d_capped, s, reverse)
    return direct + through_ratio


def token_gradient(record: LossRecord, s: Settings, entropy: EntropyMask | None = None) -> TokenGradient:
    """The derivative of the per-token loss at the new log-prob, per token: the formula of the module docstring.
    `entropy`: the record's entropy mask taken with its micro-batch's records on every rank (entropy_mask.py); the
    record's own when it is not given and top_entropy_quantile is below 1."""
    entropy = of_record(record, s.top_entropy_quantile, entropy)
    if s.loss_type not in CLIPPED_LOSS_TYPES:
        return soft_gradient(record, s, entropy)
    mask = record.completion_mask.bool()
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    adv = record.advantages.double().unsqueeze(1)
    ratio = torch.exp(log_ratios(logps, old, mask, s))
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
    dual = beyond_dual_clip(capped, adv, s)
    if s.dual_clip_ratio is not None:
        d_ratio = torch.where(dual, torch.zeros_like(d_ratio), d_ratio)
    policy = policy_mask(record, s, entropy)
    direct, through_ratio = policy_kept(policy, torch.zeros_like(ratio), -adv * d_ratio)
    margin = s.margin
    near = ((ratio - lower).abs() <= margin * lower) & (adv < 0)
    near |= ((ratio - upper).abs() <= margin * upper) & (adv > 0)
    if s.delta is not None:
        near |= (ratio - s.delta).abs() <= margin * s.delta
    near |= near_dual_clip(capped, adv, s, margin)
    if policy is not None:
        near |= policy.uncertain
    if s.beta != 0:
        kl_direct, kl_through = kl_parts(record, logps, capped, d_capped, s)
        direct, through_ratio = direct + s.beta * kl_direct, through_ratio + s.beta * kl_through
        near |= kl_uncertain(record, logps, s)
    value, shared = split(direct, through_ratio, s)
    policy = mask if policy is None else policy.kept  # the tokens whose policy term is in the loss
    zeroed = policy & (clipped_term < unclipped_term) & (d_clipped == 0) & (adv != 0)
    capped_away = policy & (unclipped_term < clipped_term) & (d_capped == 0) & (adv != 0)
    held = policy & dual if s.dual_clip_ratio is not None else None
    return TokenGradient(value, near & mask, zeroed, capped_away, shared, held, entropy)
