"""Known wrong ways to pool a GRPO interval's metrics, computed from its loss records (bug classes 16-18), and
known wrong KL terms (classes 21, 41 and a logged KL of the wrong sign), and bnpo's policy_loss as GRPO contract 1
defined it (versions.py: a trainer written before contract 2 hears which change it predates).

`diagnose_interval` names a failing metric's bug (harness/diagnose.py) when exactly one of them
reproduces the logged value within the metric's tolerance.

Each takes the token terms of one logging interval's records (its view's, view.py: the terms the
oracle pooled) and returns what a trainer with that bug logs for a metric. An empty micro-batch's
mean is 0 (a denominator clamped to 1, as TRL 1.12.0's token means), and its extreme is none (a NaN,
dropped when logged, as TRL's extremes). They name a failure's mechanism; the oracle never uses them.

A failing `kl` or `policy_loss` also has the oracle's value under each other profile's loss entries and
metric_pooling than the target declares, a failing policy_loss under its policy_loss_includes_kl too, a failing entropy
under its entropy_pass, a failing cispo_clip_ratio under its cispo_clip_population (profiles.py); a failing entropy
also the entropy aggregated as the loss is (verl's finding).
With a KL term (beta != 0) the logged `kl` and `policy_loss` have three more: the oracle's own pooling (expect.py) of
token terms whose KL is wrong: the logged kl's sign flipped (-k3), the KL term subtracted from the loss (class 41:
policy_loss only, where it holds the KL term), k3 the wrong way round (class 21: exp(logp - ref) - (logp - ref) - 1,
times the same correcting ratio)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from harness.diagnose import Candidate, diagnosed
from harness.verdict import MetricVerdict

from ..contract import CISPO_CLIP, ENTROPY, KL, POLICY_LOSS
from ..definitions import (
    DUAL_CLIP_RATIO,
    METRIC_POOLING,
    OF_THE_CISPO_CLIP,
    OF_THE_ENTROPY,
    OF_THE_KL,
    OF_THE_POLICY_LOSS,
)
from ..oracle.declared import k3, kl_weighted
from ..oracle.expect import TokenTerms, expected_from_terms, kl_pooled, objective, terms_of
from ..spec import CLIPPED_LOSS_TYPES
from ..tolerances import TOLERANCES
from ..view import IntervalView
from .profiles import other_profiles

PER_TOKEN: dict[str, Callable[[TokenTerms], torch.Tensor | None]] = {
    "entropy": lambda t: t.entropy,
    "kl": lambda t: t.kl,
    "clip_ratio/low_mean": lambda t: t.low,
    "clip_ratio/high_mean": lambda t: t.high,
    "clip_ratio/region_mean": lambda t: t.region,
    "cispo_clip_ratio": lambda t: t.cispo,
}
"""The per-token value of each token-pooled metric."""
EXTREME_FLAGS: dict[str, tuple[Callable[[TokenTerms], torch.Tensor], Callable]] = {
    "clip_ratio/low_min": (lambda t: t.low, torch.min),
    "clip_ratio/high_max": (lambda t: t.high, torch.max),
}
"""The flag and the extreme of each extreme metric."""


def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum()) / max(int(mask.sum()), 1)


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def flat_mean_of_microbatch_means(terms: Sequence[TokenTerms], metric: str) -> float | None:
    """Class 16: each micro-batch's own token mean (0 when empty), averaged over the interval's micro-batches."""
    return _mean([_token_mean(PER_TOKEN[metric](t), t.mask) for t in terms])


def window_means_averaged(terms: Sequence[TokenTerms], windows: Sequence[int], metric: str) -> float | None:
    """Class 17: each optimizer window's token mean, averaged over the interval's windows (`windows`: the window
    of each micro-batch)."""
    means = []
    for window in sorted(set(windows)):
        inside = [t for t, w in zip(terms, windows, strict=True) if w == window]
        values = torch.cat([(PER_TOKEN[metric](t) * t.mask).flatten() for t in inside])
        mask = torch.cat([t.mask.double().flatten() for t in inside])
        means.append(_token_mean(values, mask))
    return _mean(means)


def mean_of_microbatch_extremes(terms: Sequence[TokenTerms], metric: str) -> float | None:
    """Class 18: each micro-batch's extreme over its completions' clip fractions, averaged over micro-batches."""
    flag, pick = EXTREME_FLAGS[metric]
    extremes = []
    for t in terms:
        has = t.mask.any(dim=1)
        if has.any():
            extremes.append(float(pick(t.per_completion(flag(t))[has])))
    return _mean(extremes)


SHARED: dict[str, str] = {POLICY_LOSS: "loss", KL: "kl", ENTROPY: "entropy"}
"""The per-token quantity of each metric a trainer may log as its micro-batches' shares of their window's loss."""


def window_shares_by_tokens(terms: Sequence[TokenTerms], s, metric: str) -> float | None:
    """Class 19, weighted by tokens (OpenRLHF 0.11.2: training_step logs aggregate_loss's result, a micro-batch's share
    of its optimizer window's aggregate times the window's micro-batches, and ppo_train averages those weighted by
    each micro-batch's tokens): each micro-batch's share is the window's aggregate of the metric with every other
    micro-batch's values set to 0, times the window's micro-batches on every rank; the interval's value is the mean of
    the shares weighted by tokens. The aggregate is the metric's own: the loss type's objective for policy_loss, the
    declared kl_population's for kl, the token mean for entropy. It equals the token mean where every micro-batch of
    a window holds as many tokens."""
    quantity = SHARED[metric]
    if not terms or any(getattr(t, quantity) is None for t in terms):
        return None
    aggregate = {POLICY_LOSS: lambda inside: objective(inside, s).value, KL: lambda inside: kl_pooled(inside, s).value,
                 ENTROPY: lambda inside: _token_mean(torch.cat([(t.entropy * t.mask).flatten() for t in inside]),
                                                     torch.cat([t.mask.double().flatten() for t in inside]))}[metric]
    windows: dict[int, list[int]] = {}
    for i, t in enumerate(terms):
        windows.setdefault(int(t.window), []).append(i)
    total, tokens = 0.0, 0
    for members in windows.values():
        for i in members:
            alone = [terms[j] if j == i else dataclasses.replace(terms[j], **{quantity: torch.zeros_like(
                getattr(terms[j], quantity))}) for j in members]  # fmt: skip
            share = aggregate(alone)
            if share is None:
                return None
            n = int(terms[i].mask.sum())
            total, tokens = total + share * len(members) * n, tokens + n
    return total / tokens if tokens else None


def reversed_k3(interval: IntervalView) -> list[TokenTerms]:
    """The interval's token terms with k3 the wrong way round, exp(logp - ref) - (logp - ref) - 1 (clamped and
    weighted as the formula's: the correcting ratio capped by delta for the clipped loss types), in the KL and in
    the loss."""
    s, out = interval.settings, []
    for record, t in zip(interval.records, interval.terms):
        kl = k3(record.logps.double() - record.ref_logps.double(), s)
        if kl_weighted(s):
            capped = s.loss_type in CLIPPED_LOSS_TYPES and s.delta is not None
            kl = kl * (t.ratio.clamp(max=s.delta) if capped else t.ratio)
        out.append(dataclasses.replace(t, kl=kl, loss=t.loss + s.beta * (kl - t.kl)))
    return out


def kl_candidates(interval: IntervalView, metric: str) -> list[Candidate]:
    """What the known wrong KL terms give for `kl` or `policy_loss` (none without a KL term)."""
    s, terms = interval.settings, interval.terms
    if s.beta == 0 or not terms or any(t.kl is None for t in terms):
        return []
    value = lambda variant: expected_from_terms(variant, s)[metric].value  # noqa: E731
    reversed_ = Candidate((21,), "k3 the wrong way round, exp(logp - ref) - (logp - ref) - 1",
                          value(reversed_k3(interval)), "loss records")  # fmt: skip
    if metric == KL:
        flipped = [dataclasses.replace(t, kl=-t.kl) for t in terms]
        return [Candidate((), "the KL with its sign flipped, -k3", value(flipped), "loss records"), reversed_]
    subtracted = [dataclasses.replace(t, loss=t.loss - 2 * s.beta * t.kl) for t in terms]
    return [Candidate((41,), "the KL term subtracted from the loss, -beta kl", value(subtracted), "loss records"),
            reversed_]  # fmt: skip


def bnpo_of_contract_1(interval: IntervalView) -> list[Candidate]:
    """bnpo's policy_loss as GRPO contract 1 defined it, the interval's token mean of l_t (class 14: one count for
    the whole window); contract 2 (versions.py, BNPO) made it the mean of the micro-batches' token means."""
    terms = interval.terms
    if interval.settings.loss_type != "bnpo" or not terms:
        return []
    total = sum(float((t.loss * t.mask).sum()) for t in terms)
    tokens = sum(int(t.mask.sum()) for t in terms)
    formula = "bnpo's loss as the interval's token mean (GRPO contract 1's bnpo)"
    return [Candidate((14,), formula, total / max(tokens, 1), "loss records")]


def profile_candidates(interval: IntervalView, metric: str) -> list[Candidate]:
    """What the oracle gives for `kl`, `policy_loss`, `entropy` or `cispo_clip_ratio` under each other profile's
    entries than the interval's settings declare (profiles.py): the loss's, how the metric pools the interval's
    windows, for policy_loss whether it holds the KL term, for entropy the pass its entropies come from (None where the
    records hold none of that pass: no candidate), for cispo_clip_ratio the capped tokens it counts."""
    if interval.unusable or not interval.records:
        return []
    out = []
    read = {POLICY_LOSS: OF_THE_POLICY_LOSS, KL: OF_THE_KL, ENTROPY: OF_THE_ENTROPY, CISPO_CLIP: OF_THE_CISPO_CLIP}
    names = read[metric]
    for words, other in other_profiles(interval.settings, names):
        value = expected_from_terms(terms_of(interval.records, other), other)[metric].value
        out.append(Candidate((), words, value, "loss records"))
    return out


def entropy_as_loss(interval: IntervalView) -> list[Candidate]:
    """The entropy aggregated as the loss type aggregates its loss (the oracle's objective of H_t in place of l_t):
    what verl 0.9.1 logs (RayPPOTrainer.fit: agg_loss of the entropies with the actor's loss_agg_mode), a finding,
    not a definition (verl issue 3986, open, labelled a bug). Only where that differs from a token mean."""
    s, terms = interval.settings, interval.terms
    if s.loss_type not in ("grpo", "sapo", "dr_grpo", "luspo") or not terms or any(t.entropy is None for t in terms):
        return []
    value = objective(terms, s, "entropy").value
    return [Candidate((), "the entropy aggregated as the loss type aggregates its loss (verl's agg_loss with "
                      "loss_agg_mode, verl issue 3986)", value, "loss records")]  # fmt: skip


def shares(interval: IntervalView, metric: str) -> list[Candidate]:
    """Class 19's token-weighted form for `metric` (`window_shares_by_tokens`), where the interval's windows hold
    micro-batches of unequal tokens (elsewhere it is the token mean, no diagnosis). Not for bnpo's policy_loss: a
    bnpo micro-batch's share times the window's micro-batches is its own token mean, so the form is the interval's
    token mean there, which bnpo_of_contract_1 names (two names for one number would name neither)."""
    if metric == POLICY_LOSS and interval.settings.loss_type == "bnpo":
        return []
    value = window_shares_by_tokens(interval.terms, interval.settings, metric)
    said = "each micro-batch's share of its window's loss times the window's micro-batches, averaged weighted by tokens"
    return [] if value is None else [Candidate((19,), said, value, "loss records")]


def candidates(interval: IntervalView, metric: str) -> list[Candidate]:
    """What each known wrong pooling (or KL term, or another profile's loss) gives for `metric` over one interval
    (none for other metrics)."""
    terms = interval.terms
    if metric == POLICY_LOSS:
        kl = kl_candidates(interval, metric) if interval.settings.policy_loss_includes_kl else []
        return kl + bnpo_of_contract_1(interval) + profile_candidates(interval, metric) + shares(interval, metric)
    if metric in PER_TOKEN:
        empty = any(not r.completion_mask.any() for r in interval.records)
        flat = "flat mean of per-micro-batch token means" + (" (an empty one's as 0)" if empty else "")
        windows = "token means of each optimizer window, averaged over the windows"
        per_window = window_means_averaged(terms, [int(r.window) for r in interval.records], metric)
        return [
            Candidate((16,), flat, flat_mean_of_microbatch_means(terms, metric), "loss records"),
            Candidate((17,), windows, per_window, "loss records"),
            *(kl_candidates(interval, metric) + profile_candidates(interval, metric) if metric == KL else ()),
            *(profile_candidates(interval, metric) + entropy_as_loss(interval) if metric == ENTROPY else ()),
            *(shares(interval, metric) if metric in SHARED else ()),
            *(profile_candidates(interval, metric) if metric == CISPO_CLIP else ()),
        ]
    if metric in EXTREME_FLAGS:
        value = mean_of_microbatch_extremes(terms, metric)
        return [Candidate((18,), "mean over micro-batches of each one's extreme", value, "loss records")]
    return []


def diagnose_interval(verdicts: Sequence[MetricVerdict], interval: IntervalView, dtype: str) -> list[MetricVerdict]:
    """`verdicts` of one interval, each failing pooled metric diagnosed when exactly one known pooling reproduces it
    (and a failing policy_loss when one known wrong KL term does)."""
    names = {v.name for v in verdicts if v.name in PER_TOKEN or v.name.startswith("clip_ratio/")}
    s = interval.settings
    differs = other_profiles(s, (DUAL_CLIP_RATIO, METRIC_POOLING))  # entries that change policy_loss at beta 0
    if s.beta != 0 or s.loss_type == "bnpo" or differs:
        names |= {v.name for v in verdicts if v.name == POLICY_LOSS}
    if interval.unusable:
        return list(verdicts)
    return diagnosed(verdicts, {n: (lambda n=n: candidates(interval, n)) for n in names}, dtype, TOLERANCES)
