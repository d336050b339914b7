"""A compact GRPO trainer for causal language models whose logged statistics are pooled exactly.

Read top-down in algorithm order: rewards and group-relative advantages, the generation
batch, the per-token objective of one micro-batch, the loss types' normalisations, the
statistics of one micro-batch, pooling over a logging interval, and the trainer that ties
them together (generation -> num_iterations passes of steps_per_generation micro-batches
-> accumulation windows, one optimizer step per window; a window ends with its generation unless
`windows_across_generations` lets it run on into the next, as TRL's do).

Shared with the PPO trainer, where they are the same thing (common.py): sampling, truncation
at the stop token and the response mask, model inputs and temperature-scaled logits, scores
of a reward callable or model, k3, entropy and the masked mean. `masked_mean`,
`selective_log_softmax` and `entropy_from_logits` are imported into this module, and the
loop looks them up here at call time, so that a test can monkeypatch them here. Each call
site assigns its result to the name of its role (docs/grpo-metrics.md lists them).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .common import (
    Callback,
    Reward,
    entropy_from_logits,
    kl_per_token,
    masked_mean,
    policy_logits,
    response_masks,
    sample_responses,
    selective_log_softmax,
    sequence_scores,
    truncate_at_stop,
)
from .grpo_config import CLIPPED_LOSS_TYPES, GRPOConfig
from .ppo_config import ConfigError

__all__ = ["GRPOConfig", "GRPOTrainer", "masked_mean", "selective_log_softmax"]

# Order of the per-micro-batch statistics row: numerators, then the two counts.
STAT_FIELDS = (
    "entropy",
    "kl",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "cispo_clip_ratio",
    "vespo/phi_seq_mean",
    "policy_loss/token_sum",
    "policy_loss/completion_sum",
    "policy_loss/microbatch_mean",
    "count/tokens",
    "count/completions",
    "count/micro_batches",
)
TOKEN_POOLED = ("entropy", "kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                "cispo_clip_ratio")  # fmt: skip
CLIP_METRICS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")
"""Logged by the loss types with a hard clip (CLIPPED_LOSS_TYPES) only, with the two extremes."""
VESPO_CLAMP = (math.log(1e-8), 20.0)
"""vespo's bounds on the log of a sequence's importance weight (each token's log-ratio is first bounded by 20)."""
# Columns of a completion's record (then one column per reward function).
COMPLETION_FIELDS = ("length", "terminated", "reward", "zero_std")
# Columns of a trained row's clip record (one row per completion per micro-batch it ran in).
CLIP_FIELDS = ("low", "high", "has_tokens")
STD_EPS = 1e-4
"""Added to the std that advantages are divided by (TRL's constant)."""
ZERO_STD = 1e-8
"""A group whose reward std is at most this has std 0 (torch.isclose's absolute tolerance, as TRL tests it)."""
ENTROPY_PAD = -1e9
"""What pads each rank's entropies to one length before they are gathered: an entropy is never negative."""


# ---------------------------------------------------------------- rewards and advantages


def reward_functions(rewards: Reward | Sequence[Reward] | Mapping[str, Reward]) -> dict[str, Reward]:
    """Name -> reward function; a mapping keeps its names, others are named by `__name__` or their class."""
    if isinstance(rewards, Mapping):
        named = dict(rewards)
    else:
        funcs = [rewards] if isinstance(rewards, nn.Module) or callable(rewards) else list(rewards)
        names = [getattr(f, "__name__", None) or type(f).__name__ for f in funcs]
        if len(set(names)) != len(names):
            raise ConfigError(  # pragma: no mutate - message
                f"reward functions need distinct names, got {names}: pass a dict name -> function"
            )
        named = dict(zip(names, funcs))
    if not named:
        raise ConfigError("at least one reward function is needed")  # pragma: no mutate - message
    return named


def rewards_per_function(
    funcs: Mapping[str, Reward], queries: torch.Tensor, completions: torch.Tensor, lengths: torch.Tensor, pad: int
) -> torch.Tensor:
    """(N, F) float64: each function's score of each truncated completion; NaN where it could not score."""
    return torch.stack([sequence_scores(f, queries, completions, lengths, pad).double() for f in funcs.values()], 1)


def weighted_rewards(per_function: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(N,) sum of weight * score over the functions that scored; NaN where none did (unscorable)."""
    total = (per_function * weights).nansum(dim=1)
    return total.masked_fill(per_function.isnan().all(dim=1), float("nan"))


def nanstd(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Bessel-corrected standard deviation ignoring NaN; NaN where fewer than two values are left."""
    valid = ~values.isnan()
    count = valid.sum() if dim is None else valid.sum(dim=dim)
    mean = values.nanmean() if dim is None else values.nanmean(dim=dim, keepdim=True)
    squares = torch.where(valid, (values - mean) ** 2, torch.zeros_like(values))
    total = squares.sum() if dim is None else squares.sum(dim=dim)
    var = total / (count - 1).clamp(min=1)
    return torch.where(count > 1, var.sqrt(), torch.full_like(var, float("nan")))


def group_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, zero_std) of a whole generation batch, groups of `num_generations` consecutive rows.

    advantage = reward - its group's mean, divided by (std + 1e-4) of the group ('group') or of
    the batch ('batch') or not at all ('none'); 0 for an unscorable (NaN) reward. zero_std:
    whether the completion's group has reward std 0 (whatever `scale_rewards` is).
    """
    grouped = rewards.view(-1, num_generations)
    group_mean = grouped.nanmean(dim=1).repeat_interleave(num_generations)
    group_std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
    advantages = rewards - group_mean
    if scale_rewards == "group":
        advantages = advantages / (group_std + STD_EPS)
    elif scale_rewards == "batch":
        advantages = advantages / (nanstd(rewards) + STD_EPS)
    return torch.nan_to_num(advantages, nan=0.0), group_std.abs() <= ZERO_STD


def decoupled_advantages(
    scores: torch.Tensor, weights: torch.Tensor, num_generations: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, zero_std) under multi_objective_aggregation 'normalize_then_sum' (GDPO), from the (N, F) scores.

    Each function's scores are normalised within each group (minus the group's mean, over its std + 1e-4; NaN where
    the group holds fewer than two of its scores), summed weighted over the functions that give a number (0 where
    none does, NaN for an unscorable completion), and that sum normalised over the whole generation batch: minus its
    mean, over its std + 1e-4; 0 for an unscorable completion. zero_std: whether that batch std is 0.
    """
    functions = scores.shape[1]
    grouped = scores.view(-1, num_generations, functions)
    normalised = (grouped - grouped.nanmean(dim=1, keepdim=True)) / (nanstd(grouped, dim=1).unsqueeze(1) + STD_EPS)
    summed = (normalised.view(-1, functions) * weights.unsqueeze(0)).nansum(dim=1)
    summed = summed.masked_fill(scores.isnan().all(dim=1), float("nan"))
    batch_std = nanstd(summed)
    advantages = (summed - summed.nanmean()) / (batch_std + STD_EPS)
    return torch.nan_to_num(advantages, nan=0.0), (batch_std.abs() <= ZERO_STD).expand_as(summed)


# ---------------------------------------------------------------- the generation batch


def ended(completions: torch.Tensor, completion_mask: torch.Tensor, stop_token_id: int | None) -> torch.Tensor:
    """(N,) whether each completion ended with the stop token (it lies within its mask); the others are truncated.
    No stop token: none ended."""
    if stop_token_id is None:
        return torch.zeros(len(completions), dtype=torch.bool, device=completions.device)
    return ((completions == stop_token_id) & completion_mask).any(dim=1)


@dataclass
class GenerationBatch:
    """One rank's completions of one generation and what the optimisation needs, one row per completion."""

    index: int
    """Which generation of the run (0, 1, ...)."""
    prompt_completion_ids: torch.Tensor
    completion_ids: torch.Tensor
    """As sampled (the mask, not these ids, says where a completion ends)."""
    completion_mask: torch.Tensor
    """Completion tokens up to and including the stop token (bool)."""
    context_length: int
    advantages: torch.Tensor
    old_per_token_logps: torch.Tensor | None
    """The policy's log-probs at generation; None when the policy cannot move before the batch is used up."""
    ref_per_token_logps: torch.Tensor | None
    """The reference model's log-probs; None when beta == 0."""
    generation_tokens: float
    """Completion tokens of the whole generation batch, every rank (dapo's count)."""
    completion_records: torch.Tensor
    """(N, 4 + F) float64: COMPLETION_FIELDS, then each reward function's score (NaN: not scored)."""


# ---------------------------------------------------------------- the objective of one micro-batch


def clipped_objective(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    delta: float | None,
):
    """(per_token_loss, coef_1, is_low_clipped, is_high_clipped): -min(r*A, clip(r)*A) per token, r its ratio.

    `advantages` is (B, 1). r is clipped to [1 - epsilon_low, 1 + epsilon_high]; with `delta` the
    unclipped r is also capped at delta. The flags: r < 1 - epsilon_low where A < 0, and
    r > 1 + epsilon_high where A > 0 (r after the delta cap, as TRL).
    """
    coef_1 = torch.exp(per_token_logps - old_per_token_logps)
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:
        coef_1 = torch.clamp(coef_1, max=delta)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    is_low_clipped = (coef_1 < 1 - epsilon_low) & (advantages < 0)
    is_high_clipped = (coef_1 > 1 + epsilon_high) & (advantages > 0)
    return per_token_loss, coef_1, is_low_clipped, is_high_clipped


def cispo_objective(per_token_logps, old_per_token_logps, advantages, epsilon_high: float):
    """(per_token_loss, ratio, is_clipped): -sg(min(r, epsilon_high)) * A * logp per token (MiniMax-M1's CISPO).

    The capped importance weight carries no gradient; the flag is r > epsilon_high where A > 0.
    """
    ratio = torch.exp(per_token_logps - old_per_token_logps)
    weight = torch.clamp(ratio, max=epsilon_high).detach()
    return -weight * advantages * per_token_logps, ratio, (ratio > epsilon_high) & (advantages > 0)


def sapo_objective(per_token_logps, old_per_token_logps, advantages, temperature_pos: float, temperature_neg: float):
    """(per_token_loss, ratio): -sigmoid(tau (r - 1)) * 4 / tau * A per token, tau by the sign of A (SAPO's gate)."""
    ratio = torch.exp(per_token_logps - old_per_token_logps)
    tau = torch.where(advantages > 0, temperature_pos, temperature_neg)
    return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * advantages, ratio


def vespo_weights(per_token_logps, old_per_token_logps, advantages, mask, cfg) -> torch.Tensor:
    """(B, 1) vespo's sequence weight phi(w) = exp(lambda + k log w - lambda w), no gradient.

    w is the sequence's importance weight, exp of the masked sum of its tokens' log-ratios
    (each bounded by 20, the sum by VESPO_CLAMP); k and lambda are the `_pos` ones where A >= 0.
    """
    with torch.no_grad():
        log_ratio = torch.clamp(per_token_logps - old_per_token_logps, -20.0, 20.0)
        log_w = torch.clamp((log_ratio * mask).sum(dim=-1, keepdim=True), *VESPO_CLAMP)
        nonnegative = advantages >= 0
        k = torch.where(nonnegative, cfg.vespo_k_pos, cfg.vespo_k_neg)
        lam = torch.where(nonnegative, cfg.vespo_lambda_pos, cfg.vespo_lambda_neg)
        return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def sequence_log_ratio(per_token_logps, old_per_token_logps, mask) -> torch.Tensor:
    """(B, 1) each completion's mean log-ratio over its mask (0 for an empty completion: its count is clamped to 1)."""
    log_ratio = (per_token_logps - old_per_token_logps) * mask
    return log_ratio.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)


def sequence_objective(cfg, per_token_logps, old_per_token_logps, advantages, mask):
    """token_objective at importance_sampling_level 'sequence' (GSPO): one ratio per completion, s = exp of its
    mean log-ratio, in place of every token's; the clip flags are (B, 1), one per completion (TRL's GRPOTrainer)."""
    log_s = sequence_log_ratio(per_token_logps, old_per_token_logps, mask)
    zero = torch.zeros_like(log_s)
    shape = per_token_logps.shape
    if cfg.loss_type in CLIPPED_LOSS_TYPES:
        loss, ratio, low, high = clipped_objective(log_s, zero, advantages, cfg.epsilon_low, cfg.epsilon_high,
                                                   cfg.delta)  # fmt: skip
        return loss.expand(shape), ratio, {"low": low, "high": high}
    ratio = torch.exp(log_s)
    if cfg.loss_type == "cispo":
        weight = torch.clamp(ratio, max=cfg.epsilon_high).detach()
        return -weight * advantages * per_token_logps, ratio, {"cispo": (ratio > cfg.epsilon_high) & (advantages > 0)}
    if cfg.loss_type == "sapo":
        loss, _ = sapo_objective(log_s, zero, advantages, cfg.sapo_temperature_pos, cfg.sapo_temperature_neg)
        return loss.expand(shape), ratio, {}
    phi = vespo_weights(per_token_logps, old_per_token_logps, advantages, mask, cfg)  # its own sequence weight
    return -phi * advantages * per_token_logps, ratio, {"phi": phi}


def token_objective(cfg, per_token_logps, old_per_token_logps, advantages, mask):
    """(per_token_loss, ratio for the KL's correction, flags) of one micro-batch under `cfg.loss_type`.

    flags: {"low", "high"} for the clipped loss types, {"cispo"} for cispo, {"phi"} (the (B, 1)
    sequence weights) for vespo, nothing for sapo.
    """
    if cfg.importance_sampling_level == "sequence":
        return sequence_objective(cfg, per_token_logps, old_per_token_logps, advantages, mask)
    if cfg.loss_type in CLIPPED_LOSS_TYPES:
        per_token_loss, ratio, low, high = clipped_objective(
            per_token_logps, old_per_token_logps, advantages, cfg.epsilon_low, cfg.epsilon_high, cfg.delta
        )
        return per_token_loss, ratio, {"low": low, "high": high}
    if cfg.loss_type == "cispo":
        per_token_loss, ratio, clipped = cispo_objective(
            per_token_logps, old_per_token_logps, advantages, cfg.epsilon_high
        )
        return per_token_loss, ratio, {"cispo": clipped}
    if cfg.loss_type == "sapo":
        per_token_loss, ratio = sapo_objective(
            per_token_logps, old_per_token_logps, advantages, cfg.sapo_temperature_pos, cfg.sapo_temperature_neg
        )
        return per_token_loss, ratio, {}
    ratio = torch.exp(per_token_logps - old_per_token_logps)
    phi = vespo_weights(per_token_logps, old_per_token_logps, advantages, mask, cfg)
    return -phi * advantages * per_token_logps, ratio, {"phi": phi}


def kl_to_reference(
    per_token_logps: torch.Tensor, ref_per_token_logps: torch.Tensor, ratio: torch.Tensor | None
) -> torch.Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 per token, times the importance ratio when given (bias correction)."""
    per_token_kl = kl_per_token(per_token_logps, ref_per_token_logps, "k3")
    return per_token_kl if ratio is None else per_token_kl * ratio


def off_policy_sequence_mask(per_token_logps, old_per_token_logps, advantages, mask, threshold: float) -> torch.Tensor:
    """(B, 1) bool: the completions whose policy term stays in the loss under the off-policy sequence mask
    (DeepSeek-V3.2; TRL's `off_policy_mask_threshold`): those of non-negative advantage, and those whose mean over
    their mask of old_logp - logp is at most `threshold` (an empty completion's mean is 0)."""
    gap = (old_per_token_logps - per_token_logps.detach()) * mask
    mean_kl = gap.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)
    return (advantages >= 0) | (mean_kl <= threshold)


def high_entropy_mask(entropies: torch.Tensor, mask: torch.Tensor, quantile: float, accelerator) -> torch.Tensor:
    """(B, T) bool: the tokens of `mask` whose entropy is at or above the (1 - quantile) quantile (torch.quantile's
    linear interpolation) of this micro-batch's masked entropies on every rank; none when no rank has a token.

    The entropies are gathered in float32 at least (torch.quantile takes no half dtype) and compared in that dtype,
    each rank's padded to one length with ENTROPY_PAD, which no entropy can equal."""
    local = entropies[mask]
    local = local.to(torch.promote_types(local.dtype, torch.float32))
    gathered = accelerator.gather(accelerator.pad_across_processes(local, dim=0, pad_index=ENTROPY_PAD))
    gathered = gathered[gathered != ENTROPY_PAD]
    if gathered.numel() == 0:
        return torch.zeros_like(mask)
    threshold = torch.quantile(gathered, 1 - quantile)
    return (entropies.to(gathered.dtype) >= threshold) & mask


class EntropyBonus(torch.autograd.Function):
    """The entropy bonus -entropy_coef * H, H the mean per-token entropy of the optimizer step's window (its tokens on
    every rank), carried by the backward pass alone: the identity on a micro-batch's per-token loss whose backward
    also hands each of its entropies dL/dH_t = -weight_t (`GRPOTrainer.with_entropy_bonus`). The loss's value, and every
    statistic logged from it, stays the policy objective's (TRL logs policy_loss before its bonus too)."""

    @staticmethod
    def forward(ctx, per_token_loss: torch.Tensor, entropies: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(weights)
        return per_token_loss.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (weights,) = ctx.saved_tensors
        return grad, -weights, None


# ---------------------------------------------------------------- the loss types' normalisations


@dataclass(frozen=True)
class WindowCounts:
    """The sizes an accumulation window's loss is divided by, each summed over every rank."""

    completions: float
    """Rows (completions) in the window's micro-batches."""
    generation_tokens: float
    """Completion tokens of the whole generation batch the micro-batch comes from."""
    generation_share: float
    """The window's micro-batches / steps_per_generation (1 when a window is one pass over the batch)."""
    micro_batches: float
    """Micro-batches in the window."""


def loss_denominator(loss_type: str, counts: WindowCounts, max_completion_length: int) -> float:
    """What the window's summed loss numerators are divided by, so that the window's loss is its objective.

    grpo, sapo: completions (the numerators are per-completion token means); bnpo: micro-batches
    (the numerators are each micro-batch's own token mean: TRL's "local batch"); dr_grpo:
    completions * max_completion_length; dapo, cispo, vespo: the generation batch's tokens, times
    the window's share of the generation batch (as TRL scales `num_items_in_batch`); luspo:
    completions (the numerators are token sums: each completion weighted by its length).
    """
    if loss_type in ("grpo", "sapo", "luspo"):
        return max(counts.completions, 1.0)
    if loss_type == "bnpo":
        return counts.micro_batches
    if loss_type == "dr_grpo":
        return max(counts.completions, 1.0) * max_completion_length
    if loss_type in ("dapo", "cispo", "vespo"):
        return max(counts.generation_tokens, 1.0) * counts.generation_share
    raise ConfigError(f"unknown loss_type {loss_type!r}")  # pragma: no mutate - message


def loss_numerator(
    loss_type: str, token_loss: torch.Tensor, completion_loss: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """A micro-batch's share of its window's numerator: summed completion means (grpo, sapo), its token mean
    (bnpo) or its summed token losses (the others)."""
    if loss_type in ("grpo", "sapo"):
        return completion_loss.sum()
    return token_loss if loss_type == "bnpo" else token_loss * mask.sum()


# ---------------------------------------------------------------- statistics of one micro-batch


def microbatch_stats(means: Mapping[str, torch.Tensor | None], phi_sum, token_loss, completion_loss, mask,
                     sums: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:  # fmt: skip
    """One row of STAT_FIELDS: float64 numerators (token means times the token count) and the three counts.

    `means`: the micro-batch's token mean of each TOKEN_POOLED metric (None: not computed, 0);
    `phi_sum`: the sum of its rows' vespo weights (0 for other loss types);
    `sums`: numerators given as they are, in place of a mean's (the sequence-level clip flags: one per completion,
    an empty one's included, pooled over completions).
    """
    n = mask.sum().double()
    zero = torch.zeros((), dtype=torch.float64, device=n.device)
    given = sums or {}
    pooled = [given[name].double() if name in given else means[name].double() * n if means.get(name) is not None
              else zero for name in TOKEN_POOLED]  # fmt: skip
    return torch.stack(
        [
            *pooled,
            phi_sum.double().reshape(()),
            token_loss.double() * n,
            completion_loss.double().sum(),
            token_loss.double(),
            n,
            torch.tensor(float(mask.shape[0]), dtype=torch.float64, device=n.device),
            torch.ones((), dtype=torch.float64, device=n.device),
        ]
    )


def clip_rows(low_clip_per_completion, high_clip_per_completion, mask) -> torch.Tensor:
    """(B, 3) CLIP_FIELDS of one micro-batch: each row's masked mean of the two flags, and whether it has tokens."""
    has_tokens = mask.any(dim=1)
    return torch.stack([low_clip_per_completion.double(), high_clip_per_completion.double(), has_tokens.double()], 1)


# ---------------------------------------------------------------- pooling over a logging interval


def _ratio(numerator: torch.Tensor, count: torch.Tensor) -> float:
    return (numerator / count).item() if count > 0 else 0.0


def pooled_stats(rows: torch.Tensor, loss_type: str, max_completion_length: int, with_kl: bool) -> dict[str, float]:
    """Pool micro-batch rows (already gathered from every rank): sum numerators and counts, divide once."""
    if rows.numel() == 0:
        raise RuntimeError("no micro-batch ran in this interval: nothing to log")  # pragma: no mutate - message
    totals = dict(zip(STAT_FIELDS, rows.sum(dim=0)))
    tokens, completions = totals["count/tokens"], totals["count/completions"]
    names = ["entropy", *(["kl"] if with_kl else [])]
    if loss_type in CLIPPED_LOSS_TYPES:
        names += CLIP_METRICS
    elif loss_type == "cispo":
        names.append("cispo_clip_ratio")
    metrics = {name: _ratio(totals[name], tokens) for name in names}
    if loss_type == "vespo":
        metrics["vespo/phi_seq_mean"] = _ratio(totals["vespo/phi_seq_mean"], completions)
    if loss_type in ("grpo", "sapo"):
        metrics["policy_loss"] = _ratio(totals["policy_loss/completion_sum"], completions)
    elif loss_type == "bnpo":
        metrics["policy_loss"] = _ratio(totals["policy_loss/microbatch_mean"], totals["count/micro_batches"])
    elif loss_type == "dr_grpo":
        metrics["policy_loss"] = _ratio(totals["policy_loss/token_sum"], completions * max_completion_length)
    elif loss_type == "luspo":
        metrics["policy_loss"] = _ratio(totals["policy_loss/token_sum"], completions)
    else:
        metrics["policy_loss"] = _ratio(totals["policy_loss/token_sum"], tokens)
    return metrics


def sequence_clip_means(rows: torch.Tensor, loss_type: str) -> dict[str, float]:
    """At importance_sampling_level 'sequence' the clip flags are one per completion: their means over the
    interval's completions (every rank's STAT_FIELDS rows), in place of pooled_stats' token means."""
    totals = dict(zip(STAT_FIELDS, rows.sum(dim=0)))
    names = CLIP_METRICS if loss_type in CLIPPED_LOSS_TYPES else ("cispo_clip_ratio",) if loss_type == "cispo" else ()
    return {name: _ratio(totals[name], totals["count/completions"]) for name in names}


def clip_extremes(rows: torch.Tensor) -> dict[str, float]:
    """True extremes over every trained row with a token (CLIP_FIELDS rows, all ranks); 0 when there is none."""
    has_tokens = rows[:, CLIP_FIELDS.index("has_tokens")] > 0
    if not has_tokens.any():
        return {"clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.0}
    return {
        "clip_ratio/low_min": rows[has_tokens, CLIP_FIELDS.index("low")].min().item(),
        "clip_ratio/high_max": rows[has_tokens, CLIP_FIELDS.index("high")].max().item(),
    }


def _finite(value: torch.Tensor) -> float:
    """A statistic over no value (NaN) is logged as 0."""
    return value.item() if torch.isfinite(value) else 0.0


def completion_stats(records: torch.Tensor, reward_names: Sequence[str]) -> dict[str, float]:
    """Per-completion statistics over the interval's completions (each once, all ranks) from their records."""
    length, terminated, reward, zero_std = records[:, : len(COMPLETION_FIELDS)].unbind(dim=1)
    terminated = terminated > 0
    ended = length[terminated] if terminated.any() else torch.zeros(1, dtype=length.dtype, device=length.device)
    metrics = {
        "completions/mean_length": length.mean().item(),
        "completions/min_length": length.min().item(),
        "completions/max_length": length.max().item(),
        "completions/clipped_ratio": (~terminated).double().mean().item(),
        "completions/mean_terminated_length": ended.mean().item(),
        "completions/min_terminated_length": ended.min().item(),
        "completions/max_terminated_length": ended.max().item(),
        "reward": _finite(reward.nanmean()),
        "reward_std": _finite(nanstd(reward)),
        "frac_reward_zero_std": zero_std.mean().item(),
    }
    for i, name in enumerate(reward_names):
        column = records[:, len(COMPLETION_FIELDS) + i]
        metrics[f"rewards/{name}/mean"] = _finite(column.nanmean())
        metrics[f"rewards/{name}/std"] = _finite(nanstd(column))
    return metrics


@dataclass
class Interval:
    """What this rank trained since the last log: the rows the logged statistics are pooled from."""

    stats: list[torch.Tensor] = field(default_factory=list)
    """One STAT_FIELDS row per micro-batch."""
    clips: list[torch.Tensor] = field(default_factory=list)
    """One (B, 3) CLIP_FIELDS block per micro-batch."""
    completion_records: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    """(generation, row) -> that completion's record, each completion once however often it was trained on."""


# ---------------------------------------------------------------- the trainer


class GRPOTrainer:
    """GRPO for causal language models: policy, optional frozen reference, reward functions and prompts."""

    def __init__(
        self,
        config: GRPOConfig,
        policy: nn.Module,
        ref_policy: nn.Module | None,
        rewards: Reward | Sequence[Reward] | Mapping[str, Reward],
        prompts: torch.Tensor,
        pad_token_id: int,
        callbacks: Sequence[Callback] = (),
        accelerator=None,
    ) -> None:
        from accelerate import Accelerator
        from transformers import get_scheduler, set_seed

        if config.beta != 0 and ref_policy is None:
            raise ConfigError(  # pragma: no mutate - message
                f"beta={config.beta} needs a reference model (ref_policy is None)"
            )
        self.reward_funcs = reward_functions(rewards)
        weights = config.reward_weights or (1.0,) * len(self.reward_funcs)
        if len(weights) != len(self.reward_funcs):
            raise ConfigError(  # pragma: no mutate - message
                f"reward_weights has {len(weights)} weights for {len(self.reward_funcs)} reward functions"
            )
        self.config, self.pad_token_id, self.callbacks = config, pad_token_id, list(callbacks)
        self.accelerator = accelerator or Accelerator()
        # each rank its own random stream (TRL's set_seed(seed, device_specific=True)): ranks seeded alike draw
        # their completions with the same noise, so that the ranks' rollouts are not independent
        set_seed(config.seed + self.accelerator.process_index)
        # each optimizer step ends a window this trainer accumulates itself (no_sync, never accelerate's accumulate):
        # the prepared optimizer steps only while the process's shared GradientState says a window ended, which a
        # run of another Accelerator in the same process may have left saying it did not (the step skipped)
        self.accelerator.sync_gradients = True
        device = self.accelerator.device
        self.reward_weights = torch.tensor(weights, dtype=torch.float64, device=device)
        self.ref_policy = ref_policy.to(device).eval() if ref_policy is not None else None
        for f in self.reward_funcs.values():
            if isinstance(f, nn.Module):
                f.to(device).eval()
        self.prompts = prompts
        optimizer = torch.optim.AdamW(
            policy.parameters(), lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_epsilon, weight_decay=config.weight_decay,
        )
        self.model, self.optimizer = self.accelerator.prepare(policy, optimizer)
        # stepped by hand after each optimizer step, never prepared: accelerate's prepared scheduler advances once
        # per process at each step (its schedule counted in samples), which would run it world times too fast
        self.lr_scheduler = get_scheduler(config.lr_scheduler_type, optimizer, num_warmup_steps=config.warmup_steps,
                                          num_training_steps=config.max_steps)  # fmt: skip
        self.step = 0
        self.generations = 0
        self.carried: list[tuple[GenerationBatch, torch.Tensor]] = []
        """Micro-batches of a generation not yet trained, with their batch (windows across generations)."""
        self.bonus_window: tuple[float, int] = (0.0, 0)
        """The entropy bonus's window: (its tokens on every rank, its micro-batches here), set by window_step."""
        self.entropy_coef = config.entropy_coef
        """The entropy bonus's coefficient, adjusted after each step under use_adaptive_entropy."""
        self.last_window_entropy = math.inf
        """The mean entropy of the last window's bonus tokens on every rank (adaptive control; none before a step)."""
        self.applied_coef = 0.0
        """The coefficient the current window applies (window_step): entropy_coef, or under adaptive control 0 where
        the last window's mean entropy lay above entropy_target."""
        self.window_entropy = torch.zeros((), dtype=torch.float64)
        """The sum of the current window's entropies at its bonus tokens on this rank (adaptive control)."""
        self.interval = Interval()
        self.history: list[dict[str, float]] = []
        self.prompt_order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(config.seed))
        self.shuffle_generator = torch.Generator().manual_seed(config.seed + 1)

    @property
    def needs_old_logps(self) -> bool:
        """True when a generation batch outlives an optimizer step: more than one window per generation, or (windows
        across generations) windows that are not whole generations."""
        cfg = self.config
        if cfg.windows_across_generations:
            return cfg.gradient_accumulation_steps % (cfg.steps_per_generation * cfg.num_iterations) != 0
        return len(cfg.window_sizes) > 1

    # -- generation -------------------------------------------------------

    def next_prompts(self) -> torch.Tensor:
        """This rank's prompts of the next generation, each once."""
        acc, per_rank = self.accelerator, self.config.prompts_per_generation
        start = (self.generations * acc.num_processes + acc.process_index) * per_rank
        index = self.prompt_order[torch.arange(start, start + per_rank) % len(self.prompts)]
        return self.prompts[index].to(acc.device)

    @torch.no_grad()
    def generate(self) -> GenerationBatch:
        """Sample num_generations completions per prompt, score them, compute advantages and log-probs."""
        cfg, pad, acc = self.config, self.pad_token_id, self.accelerator
        unwrapped = acc.unwrap_model(self.model)
        queries = self.next_prompts().repeat_interleave(cfg.num_generations, dim=0)
        context_length = queries.shape[1]
        completion_ids = sample_responses(
            unwrapped, queries, cfg.max_completion_length, cfg.temperature, cfg.stop_token_id, pad
        )
        prompt_completion_ids = torch.cat([queries, completion_ids], dim=1)
        completions = truncate_at_stop(completion_ids, cfg.stop_token_id, pad)
        sequence_lengths, completion_mask, _ = response_masks(completions, pad)
        old_chunks, ref_chunks = [], []
        for start in range(0, len(queries), cfg.per_device_train_batch_size):
            chunk = slice(start, start + cfg.per_device_train_batch_size)
            if self.needs_old_logps:
                logits = policy_logits(unwrapped, prompt_completion_ids[chunk], context_length, pad, cfg.temperature)
                old_per_token_logps = selective_log_softmax(logits, completion_ids[chunk])
                old_chunks.append(old_per_token_logps)
            if cfg.beta != 0:
                ref_logits = policy_logits(
                    self.ref_policy, prompt_completion_ids[chunk], context_length, pad, cfg.temperature
                )
                ref_per_token_logps = selective_log_softmax(ref_logits, completion_ids[chunk])
                ref_chunks.append(ref_per_token_logps)
        advantages, completion_records = self.score(queries, completions, sequence_lengths, completion_mask)
        if cfg.mask_truncated_completions:  # scored and counted as sampled, trained on only where it ended
            completion_mask = completion_mask & ended(completions, completion_mask, cfg.stop_token_id).unsqueeze(1)
        tokens = acc.reduce(completion_mask.sum().double().reshape(1), reduction="sum")
        batch = GenerationBatch(
            index=self.generations,
            prompt_completion_ids=prompt_completion_ids,
            completion_ids=completion_ids,
            completion_mask=completion_mask,
            context_length=context_length,
            advantages=advantages,
            old_per_token_logps=torch.cat(old_chunks) if old_chunks else None,
            ref_per_token_logps=torch.cat(ref_chunks) if ref_chunks else None,
            generation_tokens=tokens.item(),
            completion_records=completion_records,
        )
        self.generations += 1
        return batch

    def score(self, queries, completions, sequence_lengths, completion_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, completion records) of this rank's rows; groups and 'batch' std over every rank."""
        cfg, acc = self.config, self.accelerator
        per_function = rewards_per_function(
            self.reward_funcs, queries, completions, sequence_lengths, self.pad_token_id
        )
        rewards = weighted_rewards(acc.gather(per_function), self.reward_weights)
        advantages, zero_std = group_advantages(rewards, cfg.num_generations, cfg.scale_rewards)
        if cfg.multi_objective_aggregation == "normalize_then_sum":
            advantages, zero_std = decoupled_advantages(acc.gather(per_function), self.reward_weights,
                                                        cfg.num_generations)  # fmt: skip
        local = slice(acc.process_index * len(queries), (acc.process_index + 1) * len(queries))
        if cfg.stop_token_id is None:
            terminated = torch.zeros(len(queries), dtype=torch.bool, device=queries.device)
        else:
            terminated = ((completions == cfg.stop_token_id) & completion_mask).any(dim=1)
        records = torch.stack(
            [completion_mask.sum(dim=1).double(), terminated.double(), rewards[local], zero_std[local].double()], 1
        )
        return advantages[local].float(), torch.cat([records, per_function], dim=1)

    # -- optimisation -----------------------------------------------------

    def micro_step(self, batch: GenerationBatch, rows: torch.Tensor, denominator: float):
        """Forward and backward of one micro-batch; returns its STAT_FIELDS row and its CLIP_FIELDS block."""
        cfg = self.config
        mask = batch.completion_mask[rows]
        completion_ids = batch.completion_ids[rows]
        advantages = batch.advantages[rows].unsqueeze(1)
        logits = policy_logits(
            self.model, batch.prompt_completion_ids[rows], batch.context_length, self.pad_token_id, cfg.temperature
        )
        per_token_logps = selective_log_softmax(logits, completion_ids)
        if batch.old_per_token_logps is None:
            old_per_token_logps = per_token_logps.detach()
        else:
            old_per_token_logps = batch.old_per_token_logps[rows]
        per_token_loss, coef_1, flags = token_objective(cfg, per_token_logps, old_per_token_logps, advantages, mask)
        if cfg.off_policy_mask_threshold is not None:  # the policy term of the completions it keeps; bonus and KL stay
            per_token_loss = per_token_loss * off_policy_sequence_mask(
                per_token_logps, old_per_token_logps, advantages, mask, cfg.off_policy_mask_threshold
            )
        if self.bonus_enabled:  # the bonus's gradient, at this micro-batch's entropies (EntropyBonus)
            per_token_loss = self.with_entropy_bonus(per_token_loss, logits, mask)
        if cfg.top_entropy_quantile < 1:  # the policy term of the high-entropy tokens alone; the KL on every token
            kept = high_entropy_mask(entropy_from_logits(logits.detach()), mask, cfg.top_entropy_quantile,
                                     self.accelerator)  # fmt: skip
            per_token_loss = per_token_loss * kept
        per_token_kl = None
        if cfg.beta != 0:
            ref_per_token_logps = batch.ref_per_token_logps[rows]
            ratio = coef_1 if cfg.use_bias_correction_kl else None
            per_token_kl = kl_to_reference(per_token_logps, ref_per_token_logps, ratio)
            per_token_loss = per_token_loss + cfg.beta * per_token_kl
        token_loss = masked_mean(per_token_loss, mask)
        completion_loss = masked_mean(per_token_loss, mask, axis=1)
        world = self.accelerator.num_processes
        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) * world / denominator
        self.accelerator.backward(loss)
        with torch.no_grad():
            entropies = entropy_from_logits(logits)
            mean_entropy = masked_mean(entropies, mask)
            mean_kl = masked_mean(per_token_kl, mask) if per_token_kl is not None else None
            is_low_clipped = flags.get("low", torch.zeros_like(mask))
            is_high_clipped = flags.get("high", torch.zeros_like(mask))
            low_clip_mean = masked_mean(is_low_clipped.float(), mask)
            high_clip_mean = masked_mean(is_high_clipped.float(), mask)
            region_clip_mean = masked_mean((is_low_clipped | is_high_clipped).float(), mask)
            cispo_clip_mean = masked_mean(flags.get("cispo", torch.zeros_like(mask)).float(), mask)
            sums = {}
            if cfg.importance_sampling_level == "sequence":  # a flag per completion, pooled over completions:
                # each numerator its flags' sum, an empty completion's flag included
                sums = dict(zip(TOKEN_POOLED[2:], (
                    flag.float().sum() for flag in (is_low_clipped, is_high_clipped, is_low_clipped | is_high_clipped,
                                                    flags.get("cispo", torch.zeros_like(is_low_clipped)))
                )))  # fmt: skip
            low_clip_per_completion = masked_mean(is_low_clipped.float(), mask, axis=1)
            high_clip_per_completion = masked_mean(is_high_clipped.float(), mask, axis=1)
            means = dict(zip(TOKEN_POOLED, (mean_entropy, mean_kl, low_clip_mean, high_clip_mean, region_clip_mean,
                                            cispo_clip_mean)))  # fmt: skip
            phi_sum = flags["phi"].sum() if "phi" in flags else torch.zeros((), device=mask.device)
            stats = microbatch_stats(means, phi_sum, token_loss, completion_loss, mask, sums)
            return stats, clip_rows(low_clip_per_completion, high_clip_per_completion, mask)

    def window_step(self, micro_batches: list[tuple[GenerationBatch, torch.Tensor]]) -> None:
        """All micro-batches of one accumulation window, each (its generation batch, its rows), then exactly one
        optimizer step. A micro-batch's loss is divided by its own generation's counts (a window may hold two)."""
        cfg, acc = self.config, self.accelerator
        self.bonus_window = self.entropy_bonus_window(micro_batches)
        gated = cfg.use_adaptive_entropy and not self.last_window_entropy <= cfg.entropy_target
        self.applied_coef = 0.0 if gated else self.entropy_coef
        self.window_entropy = torch.zeros((), dtype=torch.float64, device=acc.device)
        for i, (batch, rows) in enumerate(micro_batches):
            counts = WindowCounts(
                completions=float(sum(len(rows) for _, rows in micro_batches) * acc.num_processes),
                generation_tokens=batch.generation_tokens,
                generation_share=len(micro_batches) / cfg.steps_per_generation,
                micro_batches=float(len(micro_batches) * acc.num_processes),
            )
            denominator = loss_denominator(cfg.loss_type, counts, cfg.max_completion_length)
            is_last = i == len(micro_batches) - 1
            with acc.no_sync(self.model) if not is_last else contextlib.nullcontext():
                stats, clips = self.micro_step(batch, rows, denominator)
            self.interval.stats.append(stats)
            self.interval.clips.append(clips)
            for row in rows.tolist():
                self.interval.completion_records.setdefault((batch.index, row), batch.completion_records[row])
        if cfg.max_grad_norm is not None:
            acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
        if cfg.use_adaptive_entropy:
            self.adapt_entropy_coef()

    @property
    def bonus_enabled(self) -> bool:
        """Whether the loss carries an entropy bonus: a coefficient set, or adaptive control (TRL's)."""
        return self.config.entropy_coef != 0 or self.config.use_adaptive_entropy

    def adapt_entropy_coef(self) -> None:
        """Adaptive entropy control after a step (TRL's `_compute_loss`): the window's mean entropy over its bonus
        tokens on every rank; the coefficient up by entropy_coef_delta (at most entropy_coef_max) where that is at or
        below entropy_target, else down by it (at least entropy_coef_min)."""
        cfg, acc = self.config, self.accelerator
        tokens, _ = self.bonus_window
        mean = acc.reduce(self.window_entropy.reshape(1), reduction="sum").item() / max(tokens, 1.0)
        if mean <= cfg.entropy_target:
            self.entropy_coef = min(self.entropy_coef + cfg.entropy_coef_delta, cfg.entropy_coef_max)
        else:
            self.entropy_coef = max(self.entropy_coef - cfg.entropy_coef_delta, cfg.entropy_coef_min)
        self.last_window_entropy = mean

    def micro_batches(self, batch: GenerationBatch) -> list[torch.Tensor]:
        """Rows of every micro-batch of one generation, in training order: num_iterations passes of one shuffle."""
        cfg = self.config
        order = torch.randperm(cfg.local_generation_batch_size, generator=self.shuffle_generator)
        order = order.to(batch.completion_ids.device)
        step = cfg.per_device_train_batch_size
        one_pass = [order[start : start + step] for start in range(0, cfg.local_generation_batch_size, step)]
        return one_pass * cfg.num_iterations

    def entropy_bonus_mask(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: the tokens the entropy bonus acts on, those of the policy term (TRL's mask * entropy_mask):
        `mask`, or its high-entropy tokens where top_entropy_quantile < 1."""
        cfg = self.config
        if cfg.top_entropy_quantile < 1:
            return high_entropy_mask(entropies.detach(), mask, cfg.top_entropy_quantile, self.accelerator)
        return mask

    def entropy_bonus_window(self, micro_batches: list[tuple[GenerationBatch, torch.Tensor]]) -> tuple[float, int]:
        """(tokens the entropy bonus acts on in this window on every rank, micro-batches of the window on this rank);
        (0, n) without a bonus. Under the entropy mask each micro-batch's tokens are known from its entropies only, so
        they are computed here first, from the window's weights (no step runs before its last micro-batch)."""
        cfg, acc = self.config, self.accelerator
        if not self.bonus_enabled:
            return 0.0, len(micro_batches)
        counts = torch.zeros((), dtype=torch.float64, device=acc.device)
        for batch, rows in micro_batches:
            mask = batch.completion_mask[rows]
            if cfg.top_entropy_quantile < 1:
                with torch.no_grad():
                    logits = policy_logits(acc.unwrap_model(self.model), batch.prompt_completion_ids[rows],
                                           batch.context_length, self.pad_token_id, cfg.temperature)  # fmt: skip
                    mask = self.entropy_bonus_mask(entropy_from_logits(logits), mask)
            counts = counts + mask.sum()
        return acc.reduce(counts.reshape(1), reduction="sum").item(), len(micro_batches)

    def with_entropy_bonus(self, per_token_loss: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor
                           ) -> torch.Tensor:  # fmt: skip
        """`per_token_loss`, its backward also bringing the entropy bonus's gradient to this micro-batch's entropies:
        dL/dH_t = -coef * world / (the window's bonus tokens on every rank) at each token the bonus acts on, 0
        elsewhere, so that data parallelism's mean over the ranks makes it the window mean's; coef the window's
        applied coefficient (`applied_coef`). Under adaptive control it also adds the tokens' entropies to the
        window's sum."""
        entropies = entropy_from_logits(logits)
        acting = self.entropy_bonus_mask(entropies, mask)
        tokens, _ = self.bonus_window
        weight = self.applied_coef * self.accelerator.num_processes / max(tokens, 1.0)
        self.window_entropy = self.window_entropy + (entropies.detach() * acting).double().sum()
        return EntropyBonus.apply(per_token_loss, entropies, acting.to(entropies.dtype) * weight)

    def train_one_generation(self) -> None:
        """Generate, then one optimizer step per window of the generation, or (windows_across_generations) per
        whole window of the micro-batches carried so far (stopping at max_steps); log on time.

        The policy runs in eval mode throughout, as the PPO trainer's models do: old and new log-probs
        are two evaluations of one function of the weights, so no dropout of any kind may act in either.
        """
        cfg = self.config
        self.model.eval()
        batch = self.generate()
        micro_batches = [(batch, rows) for rows in self.micro_batches(batch)]
        if cfg.windows_across_generations:  # whole windows only: the rest waits for the next generation's
            self.carried += micro_batches
            sizes = [cfg.gradient_accumulation_steps] * (len(self.carried) // cfg.gradient_accumulation_steps)
        else:
            self.carried, sizes = micro_batches, list(cfg.window_sizes)
        for size in sizes:
            if self.step >= cfg.max_steps:
                break
            window, self.carried = self.carried[:size], self.carried[size:]
            self.window_step(window)
            self.step += 1
            if self.step % cfg.logging_steps == 0:
                self.log_interval()

    # -- logging and the loop --------------------------------------------

    def log_interval(self) -> dict[str, float]:
        """Pool everything trained since the last log over every rank, log it, and start a fresh interval."""
        cfg, acc, interval = self.config, self.accelerator, self.interval
        metrics = pooled_stats(
            acc.gather(torch.stack(interval.stats)), cfg.loss_type, cfg.max_completion_length, cfg.beta != 0
        )
        if cfg.loss_type in CLIPPED_LOSS_TYPES:
            metrics.update(clip_extremes(acc.gather(torch.cat(interval.clips))))
        metrics.update(
            completion_stats(
                acc.gather(torch.stack(list(interval.completion_records.values()))), list(self.reward_funcs)
            )
            | (sequence_clip_means(acc.gather(torch.stack(interval.stats)), cfg.loss_type)
               if cfg.importance_sampling_level == "sequence" else {})  # the clip means over completions there
        )
        metrics["learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics["step"] = self.step
        self.interval = Interval()
        self.history.append(metrics)
        for callback in self.callbacks:
            callback(metrics, self.step)
        acc.log(metrics, step=self.step)
        return metrics

    def train(self) -> list[dict[str, float]]:
        """Run up to `max_steps` optimizer steps; returns one metrics dict per logging interval."""
        from tqdm.auto import tqdm

        quiet = not sys.stderr.isatty() or not self.accelerator.is_main_process
        with tqdm(total=self.config.max_steps, initial=self.step, desc="grpo steps", disable=quiet) as bar:
            while self.step < self.config.max_steps:
                before = self.step
                self.train_one_generation()
                bar.update(self.step - before)
        if self.interval.stats:
            self.log_interval()
        return self.history
