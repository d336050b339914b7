"""The GRPO oracle: every pooled metric of an interval recomputed in float64 from the loss records alone.

A record is one micro-batch of the loss as the target saw it (a `LossRecord` of the run's
`loss_inputs`: mask, log-probs, old and reference log-probs, advantages, entropies). The oracle never
calls the trainer: the ratio, the clip flags, k3 and the per-token loss are taken from
their formulas (docs/grpo-metrics.md, sections 2 and 4), then pooled once over the
interval. What the records do not determine (no entropies, no reference log-probs while
beta != 0) is an `Expectation` without a value, which fails the check that needed it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.instrument.loss import LossRecord
from harness.oracle.pooling import Expectation, Pooled
from harness.oracle.precision import Precision, coarsest
from harness.tolerances import margin_of

from ..contract import CISPO_CLIP, CLIP_MEANS, ENTROPY, EXTREMES, KL, PHI_MEAN, POLICY_LOSS, pooled_names
from ..spec import CLIPPED_LOSS_TYPES
from .declared import dual_clipped, k3, kl_weighted
from .entropy_mask import EntropyMask, entropy_masks, of_record, policy_kept
from .records import unusable
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
    """cispo's flag r > epsilon_high where A > 0 (cispo only)."""
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
    """Under an entropy mask: |policy term| at the tokens within the rounding margin of its threshold (0 elsewhere),
    which the trainer may or may not have kept (entropy_mask.py); None without a mask."""

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
    every rank; the record's own when not given) where top_entropy_quantile is below 1."""
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
        cispo = ((ratio > s.epsilon_high) & (adv > 0)).double()
        uncertain = (((ratio - s.epsilon_high).abs() <= margin * s.epsilon_high) & (adv > 0) & inexact).double()
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
    entropy = of_record(record, s.top_entropy_quantile, entropy)
    flips = None if entropy is None else loss.abs() * entropy.uncertain
    (loss,) = policy_kept(entropy, loss)
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
    entropies = record.entropies.double() if record.entropies is not None else None
    return TokenTerms(mask, low, high, kl, loss, entropies, uncertain, cispo, phi, raw, held, operands,
                      s.sequence_level, flips)  # fmt: skip


def held_dtypes(record: LossRecord, s: Settings) -> dict[str, str | None]:
    """The dtype the trainer held the inputs of each quantity in (the coarsest of them), from the record."""
    held = lambda *names: coarsest(*(record.held_dtype(n) for n in names if getattr(record, n) is not None))  # noqa: E731
    flags = held("logps", "old_logps")
    kl = held("logps", "ref_logps") if s.beta != 0 else None
    return {"entropy": held("entropies"), "kl": kl, "flags": flags, "loss": coarsest(flags, kl, held("advantages"))}


def precision(terms: Sequence[TokenTerms], quantity: str, count: int, magnitude: float, s: Settings,
              floor: float = 0.0) -> Precision:  # fmt: skip
    """The arithmetic behind a value pooled from the terms' `quantity` ('entropy', 'kl', 'loss', 'flags'): the
    coarsest dtype the trainer held its inputs in (the run's dtype where the records do not say), `count` terms of
    mean size `magnitude`, the mean size of the operands its per-token formula rounds, and `floor`."""
    dtype = coarsest(*(t.held.get(quantity) for t in terms))
    source = "recorded dtype"
    if dtype is None:
        dtype, source = str(s.dtype).removeprefix("torch."), "the run's dtype: the records do not say"
    computed, tokens = 0.0, 0
    for t in terms:
        ops = t.operands.get(quantity)
        if ops is not None:
            computed += float(torch.where(t.mask, ops.expand_as(t.mask), torch.zeros((), dtype=ops.dtype)).sum())
            tokens += int(t.mask.sum())
    return Precision(dtype, count, magnitude, computed / tokens if tokens else 0.0, floor, source)


def _pooled_mean(metric: str, terms: Sequence[TokenTerms], quantity: str, s: Settings) -> Expectation:
    """The token mean of each term's `quantity` (entropy or kl) over the interval."""
    pooled = Pooled.of([(getattr(t, quantity), t.mask) for t in terms])
    return Expectation(metric, pooled.token_mean(), count=pooled.count, pooled=pooled, scale=pooled.scale,
                       precision=precision(terms, quantity, pooled.count, pooled.scale, s))  # fmt: skip


def _flag_mean(metric: str, terms: Sequence[TokenTerms], flag, s: Settings) -> Expectation:
    """A clip flag's token mean; its scale is the share of the flags that could round either way, which its
    tolerance allows beyond rounding (a flag within the margin of a bound may flip)."""
    if terms and terms[0].sequence_level:  # one flag per completion (the row's first column), every row counted
        rows = lambda t: torch.ones_like(t.mask[:, :1])  # noqa: E731
        pooled = Pooled.of([(flag(t)[:, :1], rows(t)) for t in terms])
        uncertain = Pooled.of([(t.uncertain[:, :1], rows(t)) for t in terms]).token_mean()
    else:
        pooled = Pooled.of([(flag(t), t.mask) for t in terms])
        uncertain = Pooled.of([(t.uncertain, t.mask) for t in terms]).token_mean()
    value = pooled.token_mean()
    return Expectation(metric, value, count=pooled.count, pooled=pooled, scale=uncertain,
                       precision=precision(terms, "flags", pooled.count, abs(value), s, floor=uncertain))  # fmt: skip


def policy_loss(terms: Sequence[TokenTerms], s: Settings) -> Expectation:
    """The loss type's objective over the whole interval (docs/grpo-metrics.md, section 4); under an entropy mask its
    comparison also allows what the tokens within rounding of the mask's threshold add if kept (their |policy term|
    pooled as the loss is)."""
    expected = objective(terms, s)
    if expected.precision is None or not any(t.flips is not None and bool(t.flips.any()) for t in terms):
        return expected
    flips = [dataclasses.replace(t, loss=t.flips if t.flips is not None else torch.zeros_like(t.loss)) for t in terms]
    floor = objective(flips, s).value or 0.0
    return dataclasses.replace(expected, precision=dataclasses.replace(expected.precision,
                                                                       floor=expected.precision.floor + floor))


def objective(terms: Sequence[TokenTerms], s: Settings) -> Expectation:
    """The loss type's objective of the terms' per-token losses, pooled as section 4 of docs/grpo-metrics.md says."""
    if s.loss_type == "bnpo":  # each micro-batch's own token mean, then their mean (TRL's local batch)
        means = [float((t.loss * t.mask).sum()) / max(int(t.mask.sum()), 1) for t in terms]
        sizes = [float((t.loss * t.mask).abs().sum()) / max(int(t.mask.sum()), 1) for t in terms]
        count = sum(int(t.mask.sum()) for t in terms)
        scale = sum(sizes) / max(len(sizes), 1)
        return Expectation(POLICY_LOSS, sum(means) / max(len(means), 1), count=count, scale=scale,
                           precision=precision(terms, "loss", count, scale, s))  # fmt: skip
    if s.loss_type in ("grpo", "sapo"):
        values = torch.cat([t.per_completion(t.loss) for t in terms])  # an empty one adds 0 and counts, as TRL's
        scale = float(values.abs().mean()) if values.numel() else 0.0
        tokens = sum(int(t.mask.sum()) for t in terms)
        return Expectation(POLICY_LOSS, float(values.mean()) if values.numel() else 0.0, count=values.numel(),
                           scale=scale, precision=precision(terms, "loss", max(tokens, 1), scale, s))  # fmt: skip
    pooled = Pooled.of([(t.loss, t.mask) for t in terms])
    if s.loss_type in ("dr_grpo", "luspo"):
        completions = sum(int(t.mask.shape[0]) for t in terms)
        per = completions * (s.max_completion_length if s.loss_type == "dr_grpo" else 1)
        total = float(torch.tensor(pooled.numerators, dtype=torch.float64).sum())
        value = total / max(per, 1)
        scale = sum(pooled.magnitudes) / max(per, 1)
        # the sum's rounding is relative to sum |l| / per; the formula's operands are per token, over `per` too
        tokens = max(pooled.count, 1)
        p = precision(terms, "loss", pooled.count, scale, s)
        p = dataclasses.replace(p, computed=p.computed * tokens / max(per, 1))
        return Expectation(POLICY_LOSS, value, count=pooled.count, pooled=pooled, scale=scale, precision=p)
    if s.loss_type in ("dapo", "cispo", "vespo"):
        return Expectation(POLICY_LOSS, pooled.token_mean(), count=pooled.count, pooled=pooled, scale=pooled.scale,
                           precision=precision(terms, "loss", pooled.count, pooled.scale, s))  # fmt: skip
    return Expectation.unknown(POLICY_LOSS, f"unknown loss_type {s.loss_type!r}")


def extremes(terms: Sequence[TokenTerms], s: Settings) -> dict[str, Expectation]:
    """True extremes over every (completion, micro-batch) pair with a token; 0 when there is none."""
    low, high, uncertain = [], [], []
    for t in terms:
        has = t.mask.any(dim=1)
        low.append(t.per_completion(t.low)[has])
        high.append(t.per_completion(t.high)[has])
        uncertain.append(t.per_completion(t.uncertain)[has])
    lows, highs, unsure = torch.cat(low), torch.cat(high), torch.cat(uncertain)
    n = int(lows.numel())
    scale = float(unsure.max()) if n else 0.0  # an extreme moves by at most one completion's uncertain share
    low, high = float(lows.min()) if n else 0.0, float(highs.max()) if n else 0.0
    length = max((int(t.mask.shape[1]) for t in terms), default=1)  # a completion's share is a mean of its tokens
    return {
        EXTREMES[0]: Expectation(EXTREMES[0], low, count=n, scale=scale,
                                 precision=precision(terms, "flags", length, abs(low), s, floor=scale)),
        EXTREMES[1]: Expectation(EXTREMES[1], high, count=n, scale=scale,
                                 precision=precision(terms, "flags", length, abs(high), s, floor=scale)),
    }  # fmt: skip


def expected_from_terms(terms: Sequence[TokenTerms], s: Settings) -> dict[str, Expectation]:
    """Every metric the token terms of one interval's (usable) records determine, pooled once over all of them."""
    out: dict[str, Expectation] = {}
    if all(t.entropy is not None for t in terms):
        out[ENTROPY] = _pooled_mean(ENTROPY, terms, "entropy", s)
    else:
        out[ENTROPY] = Expectation.unknown(ENTROPY, "the loss records hold no per-token entropies")
    if s.loss_type in CLIPPED_LOSS_TYPES:
        for name, flag in zip(CLIP_MEANS, (lambda t: t.low, lambda t: t.high, lambda t: t.region)):
            out[name] = _flag_mean(name, terms, flag, s)
        out.update(extremes(terms, s))
    if s.loss_type == "cispo":
        out[CISPO_CLIP] = _flag_mean(CISPO_CLIP, terms, lambda t: t.cispo, s)
    if s.loss_type == "vespo":
        phis = torch.cat([t.phi for t in terms])
        n = phis.numel()
        size = float(phis.abs().mean()) if n else 0.0
        ops = float(torch.cat([t.operands["phi"] for t in terms]).mean()) if n else 0.0
        p = dataclasses.replace(precision(terms, "loss", n, size, s), computed=ops)
        out[PHI_MEAN] = Expectation(PHI_MEAN, float(phis.mean()) if n else 0.0, count=n, scale=size, precision=p)
    if s.beta != 0:
        if all(t.kl is not None for t in terms):
            out[KL] = _pooled_mean(KL, terms, "kl", s)
        else:
            out[KL] = Expectation.unknown(KL, f"beta={s.beta} but the loss records hold no reference log-probs")
    out[POLICY_LOSS] = policy_loss(terms, s)
    return {n: out[n] for n in pooled_names(s.beta, s.loss_type)}


def terms_of(records: Sequence[LossRecord], s: Settings) -> list[TokenTerms]:
    """The token terms of each record, each under the entropy mask of its micro-batch on every rank (entropy_mask.py;
    none where top_entropy_quantile is 1)."""
    return [token_terms(r, s, mask) for r, mask in zip(records, entropy_masks(records, s.top_entropy_quantile))]


def expected_metrics(records: Sequence[LossRecord], spec: Any,
                     definitions: Sequence[tuple[str, Any]] = ()) -> dict[str, Expectation]:  # fmt: skip
    """Every metric the loss records of one interval determine, pooled once over all of them (the loss as the
    target's `definitions` fix it)."""
    s = Settings.of(spec, definitions)
    why = unusable(records)
    if why:
        return {n: Expectation.unknown(n, why) for n in pooled_names(s.beta, s.loss_type)}
    return expected_from_terms(terms_of(records, s), s)


def intervals(records: Sequence[LossRecord], spec: Any) -> list[list[LossRecord]]:
    """The loss records of each logging interval of `spec`'s run (by their window), in order."""
    out: list[list[LossRecord]] = [[] for _ in range(spec.total_logs)]
    for record in records:
        index = spec.interval_of(int(record.window))
        if 0 <= index < len(out):
            out[index].append(record)
    return out
