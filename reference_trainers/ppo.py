"""A compact PPO trainer for causal language models whose logged statistics are pooled exactly.

Read top-down in algorithm order: masked reductions, the reward on decoded text, KL penalty
and rewards, GAE and whitening, the clipped losses of one micro-batch, pooling of the
statistics, and the trainer that ties them together (epochs -> minibatches -> micro-batches,
one optimizer step per minibatch).

What it shares with the GRPO trainer (the masked mean, log-probs and entropy from logits,
sampling, truncation at the stop token and the response masks, model inputs and logits, the
scores of a reward callable or model, the KL estimate) is in common.py. `masked_mean`,
`selective_log_softmax` and `entropy_from_logits` are imported into this module, and the loop
looks them up here at call time, so that a test can monkeypatch them here.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .common import (
    Callback,
    Reward,
    entropy_from_logits,
    head_outputs,
    kl_per_token,
    masked_mean,
    policy_logits,
    response_masks,
    sample_responses,
    selective_log_softmax,
    sequence_scores,
    truncate_at_stop,
)
from .ppo_config import PPOConfig

# Order of the per-micro-batch statistics row: numerators, then the two counts.
STAT_FIELDS = (
    "loss/policy_avg",
    "policy/clipfrac_avg",
    "loss/value_avg",
    "val/clipfrac_avg",
    "policy/approxkl_avg",
    "policy/entropy_avg",
    "val/ratio",
    "count/response",
    "count/value",
)
RESPONSE_POOLED = ("loss/policy_avg", "policy/clipfrac_avg", "policy/approxkl_avg", "policy/entropy_avg", "val/ratio")
VALUE_POOLED = ("loss/value_avg", "val/clipfrac_avg")


# ---------------------------------------------------------------- masked reductions


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of `values` where `mask` is true."""
    return (values * mask).sum()


def masked_var(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unbiased variance of `values` where `mask` is true (0 with fewer than two entries)."""
    mean = masked_mean(values, mask)
    count = mask.sum()
    if count < 2:
        return torch.zeros((), dtype=values.dtype, device=values.device)
    return masked_sum((values - mean) ** 2, mask) / (count - 1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise `values` to unit variance (and zero mean when `shift_mean`) over `mask`."""
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + 1e-8)
    return whitened if shift_mean else whitened + mean


# ---------------------------------------------------------------- a reward on decoded text


def decoded_reward(score_texts: Callable[[list[str], list[str]], Sequence[float]], tokenizer) -> Callable:
    """A reward on decoded text: `score_texts(prompts, responses)` gets strings (pad and special tokens removed)."""

    def reward(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        prompts = tokenizer.batch_decode(queries, skip_special_tokens=True)
        texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
        return torch.as_tensor(list(score_texts(prompts, texts)), dtype=torch.float32)

    return reward


# ---------------------------------------------------------------- rewards, GAE, whitening


def compute_rewards(
    kl: torch.Tensor, scores: torch.Tensor, sequence_lengths: torch.Tensor, kl_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, non_score_reward): -kl_coef * KL per token, score added one past the last token."""
    non_score_reward = -kl_coef * kl
    rewards = non_score_reward.clone()
    last = (sequence_lengths + 1).clamp(min=0, max=kl.shape[1] - 1)
    rewards[torch.arange(len(last), device=last.device), last] += scores.to(rewards.dtype)
    return rewards, non_score_reward


def compute_gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) by generalised advantage estimation over the response positions."""
    length = rewards.shape[1]
    last_gae = torch.zeros_like(rewards[:, 0])
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        next_values = values[:, t + 1] if t + 1 < length else torch.zeros_like(values[:, t])
        delta = rewards[:, t] + gamma * next_values - values[:, t]
        last_gae = delta + gamma * lam * last_gae
        advantages[:, t] = last_gae
    return advantages, advantages + values


# ---------------------------------------------------------------- losses of one micro-batch


@dataclass
class Rollout:
    """Everything the optimisation phase needs, one row per sample of the local batch."""

    query_responses: torch.Tensor
    responses: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    response_mask: torch.Tensor
    value_mask: torch.Tensor
    context_length: int


def policy_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
):
    """(pg_loss, ratio, log_ratio, clipped): clipped surrogate, token mean over `mask`."""
    log_ratio = (new_logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped_branch = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    pg_loss = masked_mean(torch.max(unclipped, clipped_branch), mask)
    pg_clipfrac = masked_mean((clipped_branch > unclipped).float(), mask)
    return pg_loss, pg_clipfrac, ratio, log_ratio


def value_loss(
    vpred: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, cliprange_value: float
):
    """(vf_loss, vf_clipfrac): clipped value loss, token mean over `mask`."""
    vpred_clipped = torch.clamp(vpred, old_values - cliprange_value, old_values + cliprange_value)
    unclipped = torch.square(vpred - returns)
    clipped = torch.square(vpred_clipped - returns)
    vf_loss = 0.5 * masked_mean(torch.max(unclipped, clipped), mask)
    vf_clipfrac = masked_mean((clipped > unclipped).float(), mask)
    return vf_loss, vf_clipfrac


def microbatch_stats(
    pg_loss, pg_clipfrac, vf_loss, vf_clipfrac, log_ratio, ratio, entropy, r_mask, v_mask
) -> torch.Tensor:
    """One row of STAT_FIELDS: float64 numerators (summed over the masks) and the two counts."""
    n_r, n_v = r_mask.sum().double(), v_mask.sum().double()
    return torch.stack(
        [
            pg_loss.double() * n_r,
            pg_clipfrac.double() * n_r,
            vf_loss.double() * n_v,
            vf_clipfrac.double() * n_v,
            masked_sum(0.5 * log_ratio.double() ** 2, r_mask),
            masked_sum(entropy.double(), r_mask),
            masked_sum(ratio.double(), r_mask),
            n_r,
            n_v,
        ]
    )


# ---------------------------------------------------------------- pooling


def pooled_stats(rows: torch.Tensor) -> dict[str, float]:
    """Pool per-micro-batch rows (already gathered from every rank): sum numerators and counts, divide once."""
    if rows.numel() == 0:
        raise RuntimeError("no micro-batch ran in this update: nothing to log")  # pragma: no mutate - message
    totals = rows.sum(dim=0)
    n_r, n_v = totals[STAT_FIELDS.index("count/response")], totals[STAT_FIELDS.index("count/value")]
    metrics = {}
    for name in RESPONSE_POOLED + VALUE_POOLED:
        count = n_r if name in RESPONSE_POOLED else n_v
        metrics[name] = (totals[STAT_FIELDS.index(name)] / count).item() if count > 0 else 0.0
    metrics["val/ratio_var"] = ratio_variance(rows)
    return metrics


def ratio_variance(rows: torch.Tensor) -> float:
    """Unbiased variance of the per-micro-batch mean ratios over micro-batches with response tokens."""
    counts = rows[:, STAT_FIELDS.index("count/response")]
    means = rows[counts > 0, STAT_FIELDS.index("val/ratio")] / counts[counts > 0]
    return means.var(unbiased=True).item() if len(means) >= 2 else 0.0


def rollout_objectives(per_sample: torch.Tensor) -> dict[str, float]:
    """Means over all samples (all ranks) of the per-sample [kl, entropy, non_score_reward, score] sums."""
    kl, entropy, non_score, score = per_sample.double().mean(dim=0).tolist()
    return {
        "objective/kl": kl,
        "objective/entropy": entropy,
        "objective/non_score_reward": non_score,
        "objective/rlhf_reward": non_score + score,
        "objective/scores": score,
    }


# ---------------------------------------------------------------- the trainer


class PolicyAndValue(nn.Module):
    """Policy and value model behind one module, so that one `accelerator.prepare` wraps both."""

    def __init__(self, policy: nn.Module, value_model: nn.Module) -> None:
        super().__init__()
        self.policy, self.value_model = policy, value_model

    def forward(self, query_responses: torch.Tensor, context_length: int, pad_token_id: int, temperature: float):
        logits = policy_logits(self.policy, query_responses, context_length, pad_token_id, temperature)
        values = head_outputs(self.value_model, query_responses, pad_token_id)[:, context_length - 1 : -1]
        return logits, values


class PPOTrainer:
    """PPO for causal language models: policy, frozen reference, value model and reward."""

    def __init__(
        self,
        config: PPOConfig,
        policy: nn.Module,
        ref_policy: nn.Module,
        value_model: nn.Module,
        reward: Reward,
        prompts: torch.Tensor,
        pad_token_id: int,
        callbacks: Sequence[Callback] = (),
        accelerator=None,
    ) -> None:
        from accelerate import Accelerator
        from transformers import set_seed

        self.config, self.pad_token_id, self.callbacks = config, pad_token_id, list(callbacks)
        self.accelerator = accelerator or Accelerator()
        # each rank its own random stream (TRL's PPOTrainer reseeds each process with seed + 100003 * its index):
        # ranks seeded alike draw their responses with the same noise, so that the ranks' rollouts are not independent
        set_seed(config.seed + self.accelerator.process_index)
        # each optimizer step ends a window this trainer accumulates itself (no_sync, never accelerate's accumulate):
        # the prepared optimizer steps only while the process's shared GradientState says a window ended, which a
        # run of another Accelerator in the same process may have left saying it did not (the step skipped)
        self.accelerator.sync_gradients = True
        device = self.accelerator.device
        self.ref_policy = ref_policy.to(device).eval()
        self.reward = reward.to(device).eval() if isinstance(reward, nn.Module) else reward
        self.prompts = prompts
        model = PolicyAndValue(policy, value_model)
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=config.learning_rate,
            eps=1e-5, weight_decay=0.0,  # pragma: no mutate - AdamW's own settings: the contract ends at the gradient
        )  # fmt: skip
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.update = 0
        self.history: list[dict[str, float]] = []
        self.prompt_order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(config.seed))
        self.minibatch_generator = torch.Generator().manual_seed(config.seed + 1)

    # -- rollout ---------------------------------------------------------

    def next_queries(self) -> torch.Tensor:
        """This rank's slice of the next global batch of prompts."""
        acc, local = self.accelerator, self.config.local_batch_size
        start = (self.update * acc.num_processes + acc.process_index) * local
        index = self.prompt_order[torch.arange(start, start + local) % len(self.prompts)]
        return self.prompts[index].to(acc.device)

    def rollout(self) -> tuple[Rollout, torch.Tensor]:
        """Sample, score and evaluate one local batch; returns the rollout and per-sample objective sums."""
        with torch.no_grad():  # nothing of the rollout is trained through
            cfg, pad = self.config, self.pad_token_id
            unwrapped = self.accelerator.unwrap_model(self.model)
            queries = self.next_queries()
            context_length = queries.shape[1]
            responses = sample_responses(
                unwrapped.policy, queries, cfg.response_length, cfg.temperature, cfg.stop_token_id, pad
            )
            query_responses = torch.cat([queries, responses], dim=1)
            logprobs, ref_logprobs, values = [], [], []
            for start in range(0, len(queries), cfg.local_rollout_forward_batch_size):
                chunk = slice(start, start + cfg.local_rollout_forward_batch_size)
                logits, value = unwrapped(query_responses[chunk], context_length, pad, cfg.temperature)
                logprob = selective_log_softmax(logits, responses[chunk])
                ref_logits = policy_logits(
                    self.ref_policy, query_responses[chunk], context_length, pad, cfg.temperature
                )
                ref_logprob = selective_log_softmax(ref_logits, responses[chunk])
                logprobs.append(logprob)
                ref_logprobs.append(ref_logprob)
                values.append(value)
            return self.score_rollout(
                queries, responses, query_responses, torch.cat(logprobs), torch.cat(ref_logprobs), torch.cat(values)
            )

    def score_rollout(
        self, queries, responses, query_responses, logprobs, ref_logprobs, values
    ) -> tuple[Rollout, torch.Tensor]:
        """Truncation, scores, KL penalty, GAE and whitening."""
        cfg, pad = self.config, self.pad_token_id
        postprocessed = truncate_at_stop(responses, cfg.stop_token_id, pad)
        sequence_lengths, r_mask, v_mask = response_masks(postprocessed, pad)
        scores = sequence_scores(self.reward, queries, postprocessed, sequence_lengths, pad)
        if cfg.missing_eos_penalty is not None and cfg.stop_token_id is not None:
            scores = scores - cfg.missing_eos_penalty * (~(postprocessed == cfg.stop_token_id).any(dim=1)).float()
        kl = kl_per_token(logprobs, ref_logprobs, cfg.kl_estimator) * r_mask
        rewards, non_score_reward = compute_rewards(kl, scores, sequence_lengths, cfg.kl_coef)
        if cfg.whiten_rewards:
            rewards = masked_whiten(rewards, v_mask, shift_mean=False) * v_mask
        values = values * v_mask
        advantages, returns = compute_gae(rewards, values, cfg.gamma, cfg.lam)
        advantages = masked_whiten(advantages, r_mask) * r_mask
        per_sample = torch.stack(
            [kl.sum(1), masked_sum_rows(-logprobs, r_mask), non_score_reward.sum(1), scores.to(kl.dtype)], dim=1
        )
        rollout = Rollout(
            query_responses, responses, logprobs, values, advantages, returns, r_mask, v_mask, queries.shape[1]
        )
        return rollout, per_sample

    # -- optimisation ----------------------------------------------------

    def micro_step(
        self, ro: Rollout, rows: torch.Tensor, n_response: torch.Tensor, n_value: torch.Tensor
    ) -> torch.Tensor:
        """Forward and backward of one micro-batch; the loss is scaled to the minibatch's token mean."""
        cfg = self.config
        r_mask, v_mask = ro.response_mask[rows], ro.value_mask[rows]
        logits, vpred = self.model(ro.query_responses[rows], ro.context_length, self.pad_token_id, cfg.temperature)
        new_logprobs = selective_log_softmax(logits, ro.responses[rows])
        pg_loss, pg_clipfrac, ratio, log_ratio = policy_loss(
            new_logprobs, ro.logprobs[rows], ro.advantages[rows], r_mask, cfg.cliprange
        )
        vf_loss, vf_clipfrac = value_loss(vpred, ro.values[rows], ro.returns[rows], v_mask, cfg.cliprange_value)
        world = self.accelerator.num_processes
        loss = world * (pg_loss * r_mask.sum() / n_response + cfg.vf_coef * vf_loss * v_mask.sum() / n_value)
        self.accelerator.backward(loss)
        with torch.no_grad():
            entropy = entropy_from_logits(logits)
            return microbatch_stats(
                pg_loss, pg_clipfrac, vf_loss, vf_clipfrac, log_ratio, ratio, entropy, r_mask, v_mask
            )

    def minibatch_step(self, ro: Rollout, rows: torch.Tensor) -> list[torch.Tensor]:
        """All micro-batches of one minibatch, then exactly one optimizer step."""
        acc, step = self.accelerator, self.config.per_device_train_batch_size
        counts = torch.stack([ro.response_mask[rows].sum(), ro.value_mask[rows].sum()]).double()
        n_response, n_value = acc.reduce(counts, reduction="sum").clamp(min=1)
        stats = []
        for start in range(0, len(rows), step):
            is_last = start + step >= len(rows)
            with acc.no_sync(self.model) if not is_last else contextlib.nullcontext():
                stats.append(self.micro_step(ro, rows[start : start + step], n_response, n_value))
        if self.config.max_grad_norm is not None:
            acc.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return stats

    def optimise(self, ro: Rollout) -> torch.Tensor:
        """num_ppo_epochs passes, each a fresh permutation cut into minibatches; returns the stats rows."""
        cfg = self.config
        stats = []
        for _ in range(cfg.num_ppo_epochs):
            order = torch.randperm(cfg.local_batch_size, generator=self.minibatch_generator).to(ro.responses.device)
            for start in range(0, cfg.local_batch_size, cfg.local_mini_batch_size):
                stats += self.minibatch_step(ro, order[start : start + cfg.local_mini_batch_size])
        return torch.stack(stats)

    # -- logging and the loop --------------------------------------------

    def log(self, metrics: dict[str, float]) -> None:
        """Send one update's metrics to the callbacks and to accelerate's trackers."""
        self.history.append(metrics)
        for callback in self.callbacks:
            callback(metrics, self.update)
        self.accelerator.log(metrics, step=self.update)

    def train_one_update(self) -> dict[str, float]:
        """Rollout, optimisation and logging of one update; every statistic comes from this update alone.

        The models run in eval mode throughout, rollout and update alike: the ratio compares two
        evaluations of one function of the weights, so no dropout may act in either. Eval mode stops
        every kind, `nn.Dropout` modules and the dropout attention applies as a function while
        `module.training` (Llama's `attention_dropout`), which setting `p = 0` on the modules misses.
        Nothing else here needs train mode (no batch norm, no gradient checkpointing).
        """
        self.model.eval()
        rollout, per_sample = self.rollout()
        stats = self.optimise(rollout)
        acc = self.accelerator
        metrics = pooled_stats(acc.gather(stats))
        metrics.update(rollout_objectives(acc.gather(per_sample.double())))
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]  # pragma: no mutate - bookkeeping, not in the contract
        episodes = (self.update + 1) * self.config.local_batch_size * acc.num_processes  # pragma: no mutate - as lr
        metrics["episode"] = episodes  # pragma: no mutate - bookkeeping, not in the contract
        self.log(metrics)
        self.update += 1
        return metrics

    def train(self) -> list[dict[str, float]]:
        """Run `total_updates` updates; returns one metrics dict per update."""
        from tqdm.auto import tqdm

        quiet = not sys.stderr.isatty() or not self.accelerator.is_main_process
        bar = {"desc": "ppo updates", "disable": quiet}  # pragma: no mutate - progress-bar display only
        for _ in tqdm(range(self.config.total_updates), **bar):
            self.train_one_update()
        return self.history


def masked_sum_rows(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row sum of `values` where `mask` is true."""
    return (values * mask).sum(dim=1)
