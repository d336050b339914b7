"""A small PPO trainer for causal language models (policy, frozen reference, value model, reward function).

One update: sample responses, score them, KL penalty, GAE; then `epochs` passes over the
rollout, each cut into `minibatches` minibatches (one optimizer step each), each cut into
forward/backward passes of at most `rows_per_pass` rows.

What makes its logged statistics right (the contract of ppo-stats-harness, docs/metrics.md):

- every pass hands back sums over its tokens and its token counts (`tally`); `summarize`
  adds them up over the whole update and divides once, so a pass of 2 short responses
  weighs what its tokens weigh, and a pass with no response token adds nothing;
- the loss of a pass is its summed per-token loss divided by the token count of its whole
  minibatch, so the gradient of a minibatch does not depend on how it is cut;
- the optimizer steps once per minibatch, after its last pass, and `.grad` is cleared then.

`masked_mean` and `selective_log_softmax` are module-level names looked up at call time,
so a test can watch them. This module knows nothing of the harness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# The pooled statistics, in the order of a tally row; the row ends with the two token counts.
ON_RESPONSE = ("loss/policy_avg", "policy/clipfrac_avg", "policy/approxkl_avg", "policy/entropy_avg", "val/ratio")
ON_VALUE = ("loss/value_avg", "val/clipfrac_avg")
TALLY = ON_RESPONSE + ON_VALUE + ("tokens/response", "tokens/value")


@dataclass
class Settings:
    """Hyper-parameters, in this trainer's own words."""

    batch_rows: int = 12
    """Rollout rows per update."""
    minibatches: int = 2
    """Optimizer steps per epoch; `batch_rows` must be a multiple of it."""
    rows_per_pass: int = 4
    """Rows of one forward/backward pass (the last pass of a minibatch may have fewer)."""
    epochs: int = 1
    updates: int = 1
    lr: float = 1e-3
    new_tokens: int = 12
    temperature: float = 1.0
    kl_weight: float = 0.05
    kl_kind: str = "k1"
    """'k1': log p - log q; 'k3': (q/p - 1) - log(q/p)."""
    clip: float = 0.2
    value_clip: float = 0.2
    value_weight: float = 0.1
    gamma: float = 1.0
    lam: float = 0.95
    whiten_rewards: bool = False
    no_stop_penalty: float | None = None
    """Taken off the score of a response that never produced the stop token (None: no penalty)."""
    grad_clip: float | None = None
    """Global gradient-norm limit, applied once per minibatch right before the step (None: no clipping)."""
    rollout_rows: int = 64
    """Rows per forward pass while the rollout is scored."""
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.batch_rows, self.minibatches, self.rows_per_pass, self.epochs, self.updates) <= 0:
            raise ValueError("batch_rows, minibatches, rows_per_pass, epochs and updates must be positive")
        if self.batch_rows % self.minibatches:
            raise ValueError(f"batch_rows={self.batch_rows} is not a multiple of minibatches={self.minibatches}")


# ---------------------------------------------------------------- the two watched functions


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` holds; 0 where it holds nowhere."""
    weight = mask.to(values.dtype)
    if axis is None:
        return (values * weight).sum() / weight.sum().clamp(min=1)
    return (values * weight).sum(axis) / weight.sum(axis).clamp(min=1)


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[index] at every position: (B, T, V), (B, T) -> (B, T)."""
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    return picked.to(logits.dtype)


# ---------------------------------------------------------------- helpers


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) at every position."""
    logits = logits.float()
    return torch.logsumexp(logits, dim=-1) - (logits.softmax(dim=-1) * logits).sum(dim=-1)


def cut_at_stop(tokens: torch.Tensor, stop_id: int, pad_id: int) -> torch.Tensor:
    """Everything after the first stop token becomes pad."""
    is_stop = (tokens == stop_id).int()
    return tokens.masked_fill(is_stop.cumsum(dim=1) - is_stop > 0, pad_id)


def token_masks(cut: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(last, act, val): last real position per row (-1 for none); the response mask; one position more."""
    width = cut.shape[1]
    is_pad = cut == pad_id
    first_pad = torch.where(is_pad.any(dim=1), is_pad.int().argmax(dim=1), torch.full_like(cut[:, 0], width))
    last = first_pad - 1
    position = torch.arange(width, device=cut.device)
    return last, position <= last[:, None], position <= last[:, None] + 1


def whiten(values: torch.Tensor, mask: torch.Tensor, keep_mean: bool = False) -> torch.Tensor:
    """(values - mean) / std over `mask` (unbiased variance), the mean added back when `keep_mean`."""
    mean = masked_mean(values, mask)
    count = mask.sum()
    spread = masked_mean((values - mean) ** 2, mask) * count / (count - 1) if count > 1 else torch.zeros_like(mean)
    scaled = (values - mean) * torch.rsqrt(spread + 1e-8)
    return scaled + mean if keep_mean else scaled


def advantages_and_returns(rewards, values, gamma: float, lam: float):
    """Generalised advantage estimation over the response positions; returns use the raw advantages."""
    width = rewards.shape[1]
    running = torch.zeros_like(rewards[:, 0])
    adv = torch.zeros_like(rewards)
    for t in reversed(range(width)):
        following = values[:, t + 1] if t + 1 < width else torch.zeros_like(running)
        running = rewards[:, t] + gamma * following - values[:, t] + gamma * lam * running
        adv[:, t] = running
    return adv, adv + values


def inputs_for(seqs: torch.Tensor, pad_id: int) -> dict:
    """Attention mask and position ids that skip pad tokens."""
    attend = seqs != pad_id
    return {
        "input_ids": seqs.masked_fill(~attend, 0),
        "attention_mask": attend,
        "position_ids": (attend.long().cumsum(dim=1) - 1).clamp(min=0),
    }


# ---------------------------------------------------------------- the trainer


@dataclass
class Batch:
    """One rollout, one row per sample."""

    seqs: torch.Tensor  # prompt and response ids
    sampled: torch.Tensor  # response ids as sampled (before the cut at the stop token)
    old: torch.Tensor  # rollout log-probs of the sampled tokens
    values: torch.Tensor
    adv: torch.Tensor
    returns: torch.Tensor
    act: torch.Tensor  # response mask
    val: torch.Tensor  # value mask
    context: int
    per_sample: torch.Tensor  # [kl, -logp, non-score reward, score] per row, summed over `act`


class TinyPPO:
    """PPO on a policy, a frozen reference, a value model with a `score` head, and a reward function."""

    def __init__(
        self,
        settings: Settings,
        policy: nn.Module,
        ref_policy: nn.Module,
        value_model: nn.Module,
        reward_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        prompts: torch.Tensor,
        pad_id: int,
        stop_id: int,
    ) -> None:
        torch.manual_seed(settings.seed)
        self.s, self.reward_fn, self.prompts = settings, reward_fn, prompts
        self.policy, self.ref_policy, self.value_model = policy, ref_policy, value_model
        self.pad_id, self.stop_id = pad_id, stop_id
        # eval mode for good: no dropout of any kind (nn.Dropout, attention's functional dropout) in the
        # rollout or the update, so that at LR 0 every ratio is 1
        for model in (policy, ref_policy, value_model):
            model.eval()
        self.params = [p for m in (policy, value_model) for p in m.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=settings.lr, eps=1e-5, weight_decay=0.0)
        self.prompt_order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(settings.seed))
        self.shuffle = torch.Generator().manual_seed(settings.seed + 1)
        self.done = 0
        self.history: list[dict[str, float]] = []

    # -- forward passes ---------------------------------------------------

    def logits(self, model: nn.Module, seqs: torch.Tensor, context: int) -> torch.Tensor:
        """Temperature-scaled logits of the response positions."""
        out = model(**inputs_for(seqs, self.pad_id), return_dict=True)
        return out.logits[:, context - 1 : -1] / self.s.temperature

    def value(self, seqs: torch.Tensor, context: int) -> torch.Tensor:
        """The value head at each response position (read from the token before it)."""
        backbone = getattr(self.value_model, self.value_model.base_model_prefix)
        hidden = backbone(**inputs_for(seqs, self.pad_id), return_dict=True).last_hidden_state
        return self.value_model.score(hidden).squeeze(-1)[:, context - 1 : -1]

    # -- rollout ----------------------------------------------------------

    @torch.no_grad()
    def sample(self, prompts: torch.Tensor) -> torch.Tensor:
        from transformers import GenerationConfig

        how = GenerationConfig(
            max_new_tokens=self.s.new_tokens,
            do_sample=True,
            temperature=self.s.temperature,
            top_k=0,
            top_p=1.0,
            eos_token_id=self.stop_id,
            pad_token_id=self.pad_id,
        )
        attend = prompts != self.pad_id
        out = self.policy.generate(input_ids=prompts, attention_mask=attend, generation_config=how)
        sampled = out[:, prompts.shape[1] :]
        return torch.nn.functional.pad(sampled, (0, self.s.new_tokens - sampled.shape[1]), value=self.pad_id)

    @torch.no_grad()
    def rollout(self) -> Batch:
        s = self.s
        device = next(self.policy.parameters()).device
        pick = self.prompt_order[(self.done * s.batch_rows + torch.arange(s.batch_rows)) % len(self.prompts)]
        prompts = self.prompts[pick].to(device)
        context = prompts.shape[1]
        sampled = self.sample(prompts)
        seqs = torch.cat([prompts, sampled], dim=1)
        olds, refs, values = [], [], []
        for rows in torch.arange(s.batch_rows, device=device).split(s.rollout_rows):
            old_lp = selective_log_softmax(self.logits(self.policy, seqs[rows], context), sampled[rows])
            ref_lp = selective_log_softmax(self.logits(self.ref_policy, seqs[rows], context), sampled[rows])
            olds.append(old_lp)
            refs.append(ref_lp)
            values.append(self.value(seqs[rows], context))
        old, ref = torch.cat(olds), torch.cat(refs)
        cut = cut_at_stop(sampled, self.stop_id, self.pad_id)
        last, act, val = token_masks(cut, self.pad_id)
        score = self.reward_fn(prompts, cut).to(device=device, dtype=old.dtype)
        if s.no_stop_penalty is not None:
            score = score - s.no_stop_penalty * (~(cut == self.stop_id).any(dim=1)).to(score.dtype)
        log_q_over_p = ref - old
        kl = (-log_q_over_p if s.kl_kind == "k1" else log_q_over_p.exp() - 1 - log_q_over_p) * act
        penalty = -s.kl_weight * kl
        rewards = penalty.clone()
        paid_at = (last + 1).clamp(min=0, max=rewards.shape[1] - 1)
        rewards[torch.arange(len(paid_at), device=device), paid_at] += score
        if s.whiten_rewards:
            rewards = whiten(rewards, val, keep_mean=True) * val
        values = torch.cat(values) * val
        adv, returns = advantages_and_returns(rewards, values, s.gamma, s.lam)
        adv = whiten(adv, act) * act
        per_sample = torch.stack([kl.sum(1), (-old * act).sum(1), penalty.sum(1), score], dim=1).double()
        return Batch(seqs, sampled, old, values, adv, returns, act, val, context, per_sample)

    # -- learning ---------------------------------------------------------

    def one_pass(self, b: Batch, rows: torch.Tensor, act_total: torch.Tensor, val_total: torch.Tensor):
        """Forward and backward of `rows`; its loss is scaled to the minibatch's token mean. Returns its tally."""
        s = self.s
        act, val = b.act[rows], b.val[rows]
        logits = self.logits(self.policy, b.seqs[rows], b.context)
        v_now = self.value(b.seqs[rows], b.context)
        cur_lp = selective_log_softmax(logits, b.sampled[rows])
        log_ratio = (cur_lp - b.old[rows]) * act
        ratio = log_ratio.exp()
        adv = b.adv[rows]
        plain, clipped = -adv * ratio, -adv * ratio.clamp(1 - s.clip, 1 + s.clip)
        policy_term = masked_mean(torch.max(plain, clipped), act)
        policy_clipped = masked_mean((clipped > plain).float(), act)
        v_old, target = b.values[rows], b.returns[rows]
        v_kept = torch.max(torch.min(v_now, v_old + s.value_clip), v_old - s.value_clip)
        err, err_kept = (v_now - target) ** 2, (v_kept - target) ** 2
        value_term = 0.5 * masked_mean(torch.max(err, err_kept), val)
        value_clipped = masked_mean((err_kept > err).float(), val)
        n_act, n_val = act.sum(), val.sum()
        loss = policy_term * n_act / act_total + s.value_weight * value_term * n_val / val_total
        loss.backward()
        with torch.no_grad():
            as_sum = n_act.double(), n_val.double()  # a masked mean times its count is its sum
            return torch.stack(
                [
                    policy_term.double() * as_sum[0],
                    policy_clipped.double() * as_sum[0],
                    ((0.5 * log_ratio.double() ** 2) * act).sum(),
                    (token_entropy(logits).double() * act).sum(),
                    (ratio.double() * act).sum(),
                    value_term.double() * as_sum[1],
                    value_clipped.double() * as_sum[1],
                    *as_sum,
                ]
            )

    def learn(self, b: Batch) -> torch.Tensor:
        """`epochs` passes over the rollout; one optimizer step per minibatch. Returns one tally row per pass."""
        s = self.s
        tallies = []
        for _ in range(s.epochs):
            order = torch.randperm(s.batch_rows, generator=self.shuffle).to(b.seqs.device)
            for minibatch in order.split(s.batch_rows // s.minibatches):
                act_total = b.act[minibatch].sum().clamp(min=1)
                val_total = b.val[minibatch].sum().clamp(min=1)
                for rows in minibatch.split(s.rows_per_pass):
                    tallies.append(self.one_pass(b, rows, act_total, val_total))
                if s.grad_clip is not None:
                    params = [p for group in self.opt.param_groups for p in group["params"]]
                    torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
        return torch.stack(tallies)

    # -- statistics -------------------------------------------------------

    def summarize(self, tallies: torch.Tensor) -> dict[str, float]:
        """Sum every pass's numerators and counts over the update, divide once; 0 for a mean over no token."""
        total = tallies.sum(dim=0)
        n_act, n_val = total[TALLY.index("tokens/response")], total[TALLY.index("tokens/value")]
        out = {}
        for i, name in enumerate(ON_RESPONSE + ON_VALUE):
            count = n_act if name in ON_RESPONSE else n_val
            out[name] = (total[i] / count).item() if count > 0 else 0.0
        counts = tallies[:, TALLY.index("tokens/response")]
        with_tokens = counts > 0
        means = tallies[with_tokens, TALLY.index("val/ratio")] / counts[with_tokens]
        out["val/ratio_var"] = means.var().item() if len(means) > 1 else 0.0
        return out

    @staticmethod
    def objectives(per_sample: torch.Tensor) -> dict[str, float]:
        """Means over the samples of the per-sample sums."""
        kl, entropy, penalty, score = per_sample.mean(dim=0).tolist()
        return {
            "objective/kl": kl,
            "objective/entropy": entropy,
            "objective/non_score_reward": penalty,
            "objective/rlhf_reward": penalty + score,
            "objective/scores": score,
        }

    # -- the loop ---------------------------------------------------------

    def step(self) -> dict[str, float]:
        """One update: rollout, learning, logging."""
        b = self.rollout()
        metrics = self.summarize(self.learn(b))
        metrics.update(self.objectives(b.per_sample))
        self.done += 1
        self.history.append(metrics)
        return metrics

    def train(self) -> list[dict[str, float]]:
        """`updates` updates; one dict of statistics per update."""
        for _ in range(self.s.updates):
            self.step()
        return self.history
