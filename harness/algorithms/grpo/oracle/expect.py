"""The GRPO oracle: every pooled metric of an interval recomputed in float64 from the loss records alone.

A record is one micro-batch of the loss as the target saw it (a `LossRecord` of the run's
`loss_inputs`: mask, log-probs, old and reference log-probs, advantages, entropies). The oracle never
calls the trainer: the ratio, the clip flags, k3 and the per-token loss are taken from
their formulas (docs/grpo-metrics.md, sections 2 and 4; terms.py), then pooled once over the
interval, or for kl and policy_loss over each of its optimizer windows where the target declares so
(metric_pooling, definitions.py), the kl weighed as a token mean or as the loss (kl_population), the entropy
that of the pass the target declares (entropy_pass: the update's own, or the old log-prob pass's). What
the records do not determine (no entropies, no reference log-probs while beta != 0) is an
`Expectation` without a value, which fails the check that needed it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.instrument.loss import LossRecord
from harness.oracle.pooling import Expectation, Pooled
from harness.oracle.precision import Precision, coarsest

from ..contract import CISPO_CLIP, CLIP_MEANS, ENTROPY, EXTREMES, KL, PHI_MEAN, POLICY_LOSS, pooled_names
from ..definitions import INTERVAL, TOKEN_MEAN, UPDATE
from ..spec import CLIPPED_LOSS_TYPES
from .records import unusable
from .settings import Settings, log_ratios
from .terms import TokenTerms, held_dtypes, terms_of, token_terms

__all__ = ["Settings", "TokenTerms", "expected_from_terms", "expected_metrics", "held_dtypes", "intervals",
           "log_ratios", "terms_of", "token_terms"]
"""The names other modules import from the oracle; the token terms are computed in terms.py."""


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


def over_windows(terms: Sequence[TokenTerms], s: Settings,
                 aggregate: Callable[[Sequence[TokenTerms]], Expectation]) -> Expectation:  # fmt: skip
    """`aggregate` of the interval's terms as the target's metric_pooling pools it (definitions.py): over the whole
    interval ('interval'), or the mean over the interval's optimizer windows (`TokenTerms.window`: a window's
    micro-batches on every rank) of each window's own aggregate ('window_mean'). The mean's tolerance is the whole
    interval's: each window's bound is one over fewer terms, its size taken as the larger of the interval's and the
    windows' mean size, and the mean of the windows' values one more stored partial (precision.py, STAGES)."""
    whole = aggregate(terms)
    if s.metric_pooling == INTERVAL or whole.value is None:
        return whole
    windows: dict[int, list[TokenTerms]] = {}
    for t in terms:
        windows.setdefault(t.window, []).append(t)
    parts = [aggregate(inside) for inside in windows.values()]
    unknown = next((part for part in parts if part.value is None), None)
    if unknown is not None:
        return unknown
    size = max(whole.scale or 0.0, sum(part.scale or 0.0 for part in parts) / len(parts))
    p = whole.precision
    p = dataclasses.replace(p, magnitude=max(p.magnitude, size)) if p is not None else None
    value = sum(part.value for part in parts) / len(parts)
    return Expectation(whole.metric, value, count=whole.count, scale=size, precision=p)


def policy_loss(terms: Sequence[TokenTerms], s: Settings) -> Expectation:
    """The loss type's objective over the interval (docs/grpo-metrics.md, section 4), pooled as the target's
    metric_pooling says; under an entropy mask its comparison also allows what the tokens within rounding of the
    mask's threshold add if kept (their |policy term| pooled as the loss is)."""
    expected = over_windows(terms, s, lambda inside: objective(inside, s))
    if expected.precision is None or not any(t.flips is not None and bool(t.flips.any()) for t in terms):
        return expected
    flips = [dataclasses.replace(t, loss=t.flips if t.flips is not None else torch.zeros_like(t.loss)) for t in terms]
    floor = over_windows(flips, s, lambda inside: objective(inside, s)).value or 0.0
    return dataclasses.replace(expected, precision=dataclasses.replace(expected.precision,
                                                                       floor=expected.precision.floor + floor))


def kl_pooled(terms: Sequence[TokenTerms], s: Settings) -> Expectation:
    """The pooled kl of the terms as the target's kl_population weighs its tokens (definitions.py): their token mean
    ('token_mean', docs/grpo-metrics.md section 2), or the loss type's aggregate of kl_t as its objective aggregates
    l_t ('as_loss'; bnpo's, whose objective is per micro-batch, a systems cut, the token mean)."""
    if s.kl_population == TOKEN_MEAN or s.loss_type == "bnpo":
        return _pooled_mean(KL, terms, "kl", s)
    return dataclasses.replace(objective(terms, s, "kl"), metric=KL)


def objective(terms: Sequence[TokenTerms], s: Settings, quantity: str = "loss") -> Expectation:
    """The loss type's objective of the terms' per-token losses (or of another per-token `quantity`: 'kl'), pooled as
    section 4 of docs/grpo-metrics.md says."""
    of = lambda t: getattr(t, quantity)  # noqa: E731
    if s.loss_type == "bnpo":  # each micro-batch's own token mean, then their mean (TRL's local batch)
        means = [float((of(t) * t.mask).sum()) / max(int(t.mask.sum()), 1) for t in terms]
        sizes = [float((of(t) * t.mask).abs().sum()) / max(int(t.mask.sum()), 1) for t in terms]
        count = sum(int(t.mask.sum()) for t in terms)
        scale = sum(sizes) / max(len(sizes), 1)
        return Expectation(POLICY_LOSS, sum(means) / max(len(means), 1), count=count, scale=scale,
                           precision=precision(terms, quantity, count, scale, s))  # fmt: skip
    if s.loss_type in ("grpo", "sapo"):
        values = torch.cat([t.per_completion(of(t)) for t in terms])  # an empty one adds 0 and counts, as TRL's
        scale = float(values.abs().mean()) if values.numel() else 0.0
        tokens = sum(int(t.mask.sum()) for t in terms)
        return Expectation(POLICY_LOSS, float(values.mean()) if values.numel() else 0.0, count=values.numel(),
                           scale=scale, precision=precision(terms, quantity, max(tokens, 1), scale, s))  # fmt: skip
    pooled = Pooled.of([(of(t), t.mask) for t in terms])
    if s.loss_type in ("dr_grpo", "luspo"):
        completions = sum(int(t.mask.shape[0]) for t in terms)
        per = completions * (s.max_completion_length if s.loss_type == "dr_grpo" else 1)
        total = float(torch.tensor(pooled.numerators, dtype=torch.float64).sum())
        value = total / max(per, 1)
        scale = sum(pooled.magnitudes) / max(per, 1)
        # the sum's rounding is relative to sum |l| / per; the formula's operands are per token, over `per` too
        tokens = max(pooled.count, 1)
        p = precision(terms, quantity, pooled.count, scale, s)
        p = dataclasses.replace(p, computed=p.computed * tokens / max(per, 1))
        return Expectation(POLICY_LOSS, value, count=pooled.count, pooled=pooled, scale=scale, precision=p)
    if s.loss_type in ("dapo", "cispo", "vespo"):
        return Expectation(POLICY_LOSS, pooled.token_mean(), count=pooled.count, pooled=pooled, scale=pooled.scale,
                           precision=precision(terms, quantity, pooled.count, pooled.scale, s))  # fmt: skip
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
        out[ENTROPY] = Expectation.unknown(ENTROPY, "the loss records hold no per-token entropies" if s.entropy_pass
                                           == UPDATE else "the loss records hold no entropies of the pass before "
                                           "the update (old_entropies), which the target declares its entropy's "
                                           "(entropy_pass before_update)")  # fmt: skip
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
            out[KL] = over_windows(terms, s, lambda inside: kl_pooled(inside, s))
        else:
            out[KL] = Expectation.unknown(KL, f"beta={s.beta} but the loss records hold no reference log-probs")
    out[POLICY_LOSS] = policy_loss(terms, s)
    return {n: out[n] for n in pooled_names(s.beta, s.loss_type)}


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
