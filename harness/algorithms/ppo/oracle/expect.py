"""What the PPO contract says each logged statistic should be, recomputed in float64 from update views.

Pooled means: per micro-batch sums of per-token values over the oracle's own masks, over
every micro-batch of the given updates (one per rank), divided once (`oracle.pooling`).
Rollout objectives: per-sample sums over R, averaged over every rollout sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from harness.errors import HarnessConfigError, NotRecomputable
from harness.oracle.pooling import Expectation, Pooled
from harness.oracle.precision import Precision, coarsest

from ..contract import POOLED_MEANS, RATIO_VAR, RATIO_VAR_OF, ROLLOUT, SCORED, PooledMean
from ..view import MicroBatchView, UpdateView
from .scores import Unscored

NO_MICRO_BATCHES = "no training micro-batches were recorded (no 'new_logprobs' calls)"
KL_ESTIMATORS = ("k1", "k3")
_OF_LOG_RATIO = {"half_square": lambda d: 0.5 * d.square(), "exp": torch.exp}


def per_token(metric: PooledMean, micro: MicroBatchView) -> torch.Tensor:
    """The per-token values `metric` pools in `micro` (NotRecomputable when the records do not give them)."""
    if metric.source == "entropy":
        values = micro.record.entropy
    elif metric.source == "log_ratio":
        values = _OF_LOG_RATIO[metric.of_log_ratio](micro.log_ratio())
    else:
        values = metric.scale * micro.site_values(metric.source)
    mask = micro.mask(metric.mask)
    if values.shape != mask.shape:
        raise NotRecomputable(
            f"{micro.where}: values of shape {tuple(values.shape)} "
            f"do not match the {metric.mask} mask of shape {tuple(mask.shape)}"
        )
    return values


def pooled(metric: PooledMean, micros: Sequence[MicroBatchView]) -> Pooled:
    """`metric`'s sums and counts, one per micro-batch (NotRecomputable from any micro-batch)."""
    return Pooled.of([(per_token(metric, micro), micro.mask(metric.mask)) for micro in micros])


def pooled_mean(metric: PooledMean, micros: Sequence[MicroBatchView]) -> Expectation:
    """The token mean of `metric` over `micros`; 0 for a mean over no token (docs/architecture.md)."""
    if not micros:
        return Expectation.unknown(metric.name, NO_MICRO_BATCHES)
    try:
        sums = pooled(metric, micros)
    except NotRecomputable as why:
        return Expectation.unknown(metric.name, str(why))
    if sums.count == 0:
        reason = f"no {metric.mask}-active token in any micro-batch: logged as 0"
        return Expectation(metric.name, 0.0, reason, count=0, pooled=sums, scale=0.0)
    return Expectation(metric.name, sums.token_mean(), count=sums.count, pooled=sums, scale=sums.scale,
                       precision=precision(metric, micros, sums))  # fmt: skip


def precision(metric: PooledMean, micros: Sequence[MicroBatchView], sums: Pooled) -> Precision | None:
    """The arithmetic behind a pooled mean of values the trainer held (oracle/precision.py): the values it handed
    to masked_mean, in the dtype it held them, or its log-ratios redone from the log-probs it returned. None for
    the entropy, which the spy recomputes from the logits in float64: the trainer's own entropy carries the
    rounding of its own formula over the vocabulary, and the table's row judges it."""
    if metric.source == "entropy":
        return None
    computed = 0.0
    if metric.source == "log_ratio":
        dtype = coarsest(*(m.record.dtype for m in micros))
        parts = [(_operands(metric, m), m.mask(metric.mask)) for m in micros]
        computed = Pooled.of(parts).token_mean()
    else:
        dtype = coarsest(*(c.dtype for m in micros for c in m.sites.get(metric.source, ())))
    if dtype is None:
        return None
    return Precision(dtype, sums.count, sums.scale, computed, 0.0, "recorded dtype")


def _operands(metric: PooledMean, micro: MicroBatchView) -> torch.Tensor:
    """Per token, the size of what the trainer's formula of the log-ratio rounds: d^2 for d^2 / 2 (d rounded once),
    r (1 + |d|) for r = exp(d)."""
    d = micro.log_ratio()
    return d.square() if metric.of_log_ratio == "half_square" else torch.exp(d) * (1 + d.abs())


def ratio_variance(micros: Sequence[MicroBatchView]) -> Expectation:
    """Unbiased variance of per-micro-batch masked ratio means, over micro-batches with |R| > 0."""
    if not micros:
        return Expectation.unknown(RATIO_VAR, NO_MICRO_BATCHES)
    ratio = next(m for m in POOLED_MEANS if m.name == RATIO_VAR_OF)
    try:
        sums = pooled(ratio, micros)
    except NotRecomputable as why:
        return Expectation.unknown(RATIO_VAR, str(why))
    value, scale = sums.variance_of_part_means(), sums.variance_scale()
    return Expectation(RATIO_VAR, value, count=len(sums.part_means()), pooled=sums, scale=scale)


def pooled_expectations(updates: Sequence[UpdateView]) -> dict[str, Expectation]:
    """The seven pooled means and val/ratio_var over all micro-batches of `updates`."""
    micros = [micro for update in updates for micro in update.micro_batches]
    out = {metric.name: pooled_mean(metric, micros) for metric in POOLED_MEANS}
    out[RATIO_VAR] = ratio_variance(micros)
    return out


# ---------------------------------------------------------------------------- rollout objectives


def kl_per_token(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate: k1 = logp - ref, k3 = (r - 1) - log r with r = exp(ref - logp)."""
    log_r = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_r
    if estimator == "k3":
        return log_r.exp() - 1 - log_r
    raise HarnessConfigError(f"unknown kl_estimator {estimator!r}; expected one of {', '.join(KL_ESTIMATORS)}")


def _row_sums(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row sums over the positions where `mask` holds (whatever is elsewhere, a NaN sentinel too, is ignored)."""
    return torch.where(mask, values, torch.zeros_like(values)).sum(dim=-1)


def rollout_expectations(
    updates: Sequence[UpdateView],
    kl_coef: float,
    kl_estimator: str,
    scores: Any = None,
    missing_eos_penalty: float | None = None,
) -> dict[str, Expectation]:
    """objective/*: per-sample sums over R, averaged over every sample of `updates` (one update per rank).

    `scores` are what the reward gave, one per sample (or `Unscored`: why they are unknown, which fails; None:
    the target shows none); a response without the stop token loses `missing_eos_penalty` from its score, when
    that is set.
    """
    if not updates:
        return {name: Expectation.unknown(name, "no update was given to the oracle") for name in ROLLOUT}
    missing = next((u.rollout_problem for u in updates if u.rollout is None), None)
    if missing:
        return {name: Expectation.unknown(name, missing) for name in ROLLOUT}
    rollouts = [u.rollout for u in updates]
    mask = torch.cat([r.response_mask for r in rollouts])
    logprobs = torch.cat([r.logprobs for r in rollouts])
    samples = int(mask.shape[0])
    entropy = _row_sums(-logprobs, mask)
    out = {"objective/entropy": Expectation("objective/entropy", float(entropy.mean()), scale=_scale(entropy))}
    ref_problem = next((r.ref_problem for r in rollouts if r.ref_problem), None)
    kl_mean = None
    if ref_problem:
        out.update({n: Expectation.unknown(n, ref_problem) for n in ("objective/kl", "objective/non_score_reward")})
    else:
        ref = torch.cat([r.ref_logprobs for r in rollouts])
        kl = _row_sums(kl_per_token(logprobs, ref, kl_estimator), mask)
        kl_mean, kl_scale = float(kl.mean()), _scale(kl)
        out["objective/kl"] = Expectation("objective/kl", kl_mean, count=samples, scale=kl_scale)
        out["objective/non_score_reward"] = Expectation(
            "objective/non_score_reward", -kl_coef * kl_mean, scale=abs(kl_coef) * kl_scale
        )
    if scores is not None and not isinstance(scores, Unscored) and missing_eos_penalty is not None:
        scores = penalised(scores, [r.has_stop for r in rollouts], missing_eos_penalty)
    kl_scale = out["objective/kl"].scale
    out.update(score_expectations(scores, samples, kl_mean, kl_coef, kl_scale or 0.0))
    return {name: out[name] for name in ROLLOUT}


def _scale(per_sample: torch.Tensor) -> float:
    """Mean |per-sample value|: what float rounding of a mean over samples is relative to."""
    return float(per_sample.abs().mean()) if per_sample.numel() else 0.0


def penalised(scores: Any, has_stop: Sequence[torch.Tensor | None], penalty: float) -> Any:
    """Scores less `penalty` where the response has no stop token (unchanged when the count does not match)."""
    if any(h is None for h in has_stop):
        return scores  # no stop token: nothing to penalise
    values = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    stops = torch.cat(list(has_stop))
    if values.numel() != stops.numel():
        return values  # score_expectations says so
    return values - penalty * (~stops).double()


def score_expectations(
    scores: Any, samples: int, kl_mean: float | None, kl_coef: float, kl_scale: float = 0.0
) -> dict[str, Expectation]:
    """objective/scores and objective/rlhf_reward; optional when the target shows no scores (None)."""
    if scores is None:
        return {n: Expectation.unknown(n, "no scores were supplied to the oracle", required=False) for n in SCORED}
    if isinstance(scores, Unscored):
        return {n: Expectation.unknown(n, scores.reason) for n in SCORED}
    values = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    if values.numel() != samples:
        reason = f"{values.numel()} scores were supplied for {samples} rollout samples"
        return {n: Expectation.unknown(n, reason) for n in SCORED}
    mean_score, score_scale = float(values.mean()), _scale(values)
    out = {"objective/scores": Expectation("objective/scores", mean_score, count=samples, scale=score_scale)}
    if kl_mean is None:
        out["objective/rlhf_reward"] = Expectation.unknown("objective/rlhf_reward", "objective/kl is unknown")
    else:
        scale = score_scale + abs(kl_coef) * kl_scale
        out["objective/rlhf_reward"] = Expectation("objective/rlhf_reward", mean_score - kl_coef * kl_mean, scale=scale)
    return out


def expected_metrics(
    updates: UpdateView | Sequence[UpdateView],
    kl_coef: float,
    kl_estimator: str,
    scores: Any = None,
    missing_eos_penalty: float | None = None,
) -> dict[str, Expectation]:
    """Every logged statistic the oracle can recompute for one update (a list: the same update on each rank)."""
    updates = [updates] if isinstance(updates, UpdateView) else list(updates)
    if kl_estimator not in KL_ESTIMATORS:
        raise HarnessConfigError(f"unknown kl_estimator {kl_estimator!r}; expected one of {', '.join(KL_ESTIMATORS)}")
    rollout = rollout_expectations(updates, kl_coef, kl_estimator, scores, missing_eos_penalty)
    return {**pooled_expectations(updates), **rollout}
