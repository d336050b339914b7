"""A small GRPO trainer for causal language models (policy, optional frozen reference, reward functions).

One generation: sample `group_size` completions for each of a few prompts, score them with every
reward function, and turn the weighted rewards into group-relative advantages; then `reuse` passes
over the generation batch, cut into passes of `rows_per_pass` completions, the passes grouped into
accumulation windows of `passes_per_step` (a generation's last window may be shorter; a window never
holds passes of two generations), one optimizer step per window.

What makes its logged statistics right (the GRPO contract of ppo-stats-harness, docs/grpo-metrics.md):

- the mask of a completion is its tokens up to and including its first stop token (a pad sampled
  before it counts); with `drop_truncated` a completion that never stopped has an empty mask;
- every pass hands back sums over its tokens with its token, completion and pass counts (`TALLY`),
  and the per-completion clip fractions of its rows; `summarize` adds them up over the whole logging
  interval and divides once, so a pass of two short completions weighs what its tokens weigh and a
  pass with no token adds nothing;
- each completion's length, reward and group statistics are kept once per interval, however many
  passes trained it;
- the loss of a pass is its share of its window's loss, the window's normaliser computed before the
  window's first pass (section 4 of the contract), so a window's gradient does not depend on the cut.

`token_logprobs` and `token_entropy` are module-level names looked up at call time, so that a test
can wrap them. This module knows nothing of the harness.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
HARD_CLIP = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
"""The loss types that clip the ratio, and log the clip_ratio statistics."""
STD_EPS = 1e-4
"""Added to the std an advantage is divided by."""
ZERO_STD = 1e-8
"""A group whose reward std is at most this counts as having std 0."""
LOG_W_BOUNDS = (math.log(1e-8), 20.0)
"""vespo: bounds on the log of a completion's importance weight (each token's log-ratio first bounded by 20)."""

# The sums and counts of one pass, in the order of a tally row.
TOKEN_MEANS = (
    "entropy",
    "kl",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "cispo_clip_ratio",
)
TALLY = (*TOKEN_MEANS, "phi", "loss_tokens", "loss_completions", "loss_pass", "tokens", "completions", "passes")
# One row per completion of a generation: its length, whether it stopped, its reward, its group's zero std.
SUMMARY = ("length", "stopped", "reward", "zero_std")

RewardFn = Callable[[torch.Tensor, torch.Tensor], "torch.Tensor | Sequence[float | None]"]
"""`fn(prompts, completions)`: one score per completion (completions cut after the stop token, padded);
NaN or None where the function cannot score a completion."""


@dataclass
class Settings:
    """Hyper-parameters, in this trainer's own words."""

    rows_per_pass: int = 4
    """Completions of one forward/backward pass."""
    passes_per_step: int = 2
    """Passes accumulated into one optimizer step."""
    passes_per_generation: int | None = None
    """Passes that cover one generation batch; None: passes_per_step."""
    group_size: int = 4
    """Completions sampled per prompt."""
    reuse: int = 1
    """Passes over each generation batch."""
    steps: int = 2
    """Optimizer steps of the run."""
    log_every: int = 1
    """Optimizer steps per logged interval (a partial last interval is logged too)."""
    lr: float = 1e-3
    new_tokens: int = 12
    temperature: float = 1.0
    loss_type: str = "dapo"
    kl_weight: float = 0.0
    """Weight of the k3 KL to the reference (0: no reference needed)."""
    kl_times_ratio: bool = True
    """Multiply each token's KL by its importance ratio (the bias correction)."""
    clip_low: float = 0.2
    clip_high: float = 0.2
    """The clip range [1 - clip_low, 1 + clip_high]; cispo's cap on its weight is clip_high itself."""
    ratio_cap: float | None = None
    """Cap on the unclipped ratio of the clipped loss types (None: none)."""
    sapo_tau: tuple[float, float] = (1.0, 1.05)
    """sapo's gate temperatures, for positive and for other advantages."""
    vespo_pos: tuple[float, float] = (2.0, 3.0)
    vespo_neg: tuple[float, float] = (3.0, 2.0)
    """vespo's (k, lambda) for advantages >= 0 and < 0."""
    scale_rewards: str = "group"
    """Divide advantages by the std of the 'group', of the whole 'batch', or by nothing ('none')."""
    reward_weights: tuple[float, ...] | None = None
    """One weight per reward function (None: all 1)."""
    grad_clip: float | None = None
    """Global gradient-norm limit, applied once per window right before the step."""
    drop_truncated: bool = False
    """Empty the mask of a completion that never produced the stop token."""
    seed: int = 0

    def __post_init__(self) -> None:
        sizes = (
            self.rows_per_pass,
            self.passes_per_step,
            self.generation_passes,
            self.reuse,
            self.steps,
            self.log_every,
            self.new_tokens,
        )
        if min(sizes) <= 0:
            raise ValueError("rows, passes, reuse, steps, log_every and new_tokens must be positive")
        if self.group_size < 2:
            raise ValueError(f"group_size={self.group_size}: a group needs at least two completions")
        if self.generation_rows % self.group_size:
            raise ValueError(
                f"a generation of {self.generation_rows} completions is not a whole number of groups "
                f"of {self.group_size}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type={self.loss_type!r}: one of {', '.join(LOSS_TYPES)}")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(f"scale_rewards={self.scale_rewards!r}: 'group', 'batch' or 'none'")

    @property
    def generation_passes(self) -> int:
        return self.passes_per_generation or self.passes_per_step

    @property
    def generation_rows(self) -> int:
        """Completions per generation."""
        return self.rows_per_pass * self.generation_passes

    @property
    def windows(self) -> tuple[int, ...]:
        """Passes of each window of one generation, in order."""
        total = self.generation_passes * self.reuse
        full, rest = divmod(total, self.passes_per_step)
        return (self.passes_per_step,) * full + ((rest,) if rest else ())


# ---------------------------------------------------------------- the two functions of the logits


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[ids] at every position: (B, T, V), (B, T) -> (B, T), in at least float32."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) at every position, in at least float32."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


# ---------------------------------------------------------------- helpers


def model_inputs(seqs: torch.Tensor, pad_id: int) -> dict:
    """Attend to every token but pad; each position counts the real tokens before it."""
    real = seqs != pad_id
    return {"input_ids": seqs, "attention_mask": real.long(), "position_ids": (real.long().cumsum(1) - 1).clamp(0)}


def completion_mask(ids: torch.Tensor, stop_id: int, drop_truncated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, stopped): every token up to and including the first stop token (all of them when there is none),
    and whether the completion produced it; with `drop_truncated` one that did not has an empty mask."""
    is_stop = ids == stop_id
    before = is_stop.long().cumsum(dim=1) - is_stop.long()  # stop tokens strictly before each position
    mask = before == 0
    stopped = is_stop.any(dim=1)
    if drop_truncated:
        mask = mask & stopped.unsqueeze(1)
    return mask, stopped


def nan_std(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Bessel-corrected std leaving NaN out; NaN where fewer than two values are left."""
    kept = ~values.isnan()
    n = kept.sum() if dim is None else kept.sum(dim)
    mean = values.nanmean() if dim is None else values.nanmean(dim, keepdim=True)
    squares = torch.where(kept, values - mean, torch.zeros_like(values)) ** 2
    total = squares.sum() if dim is None else squares.sum(dim)
    std = (total / (n - 1).clamp(min=1)).sqrt()
    return torch.where(n > 1, std, torch.full_like(std, math.nan))


def as_scores(output, rows: int) -> torch.Tensor:
    """A reward function's output as (rows,) float64, None as NaN."""
    if isinstance(output, torch.Tensor):
        return output.detach().to("cpu", torch.float64).reshape(rows)
    return torch.tensor([math.nan if s is None else float(s) for s in output], dtype=torch.float64)


def advantages_of(rewards: torch.Tensor, group: int, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, zero_std) of one generation's weighted rewards (groups of `group` consecutive rows)."""
    grouped = rewards.view(-1, group)
    mean = grouped.nanmean(dim=1).repeat_interleave(group)
    std = nan_std(grouped, dim=1).repeat_interleave(group)
    centred = rewards - mean
    if scaling == "group":
        centred = centred / (std + STD_EPS)
    elif scaling == "batch":
        centred = centred / (nan_std(rewards) + STD_EPS)
    return centred.nan_to_num(nan=0.0), std <= ZERO_STD  # a NaN std (too few scores) is not "zero"


def finite_or_zero(value: torch.Tensor) -> float:
    """A statistic over too few values (NaN) is logged as 0."""
    return float(value) if torch.isfinite(value) else 0.0


# ---------------------------------------------------------------- the trainer


@dataclass
class Generation:
    """One generation batch, one row per completion (groups of `group_size` consecutive rows)."""

    index: int
    seqs: torch.Tensor
    """Prompt and completion ids."""
    ids: torch.Tensor
    """Completion ids as sampled."""
    mask: torch.Tensor
    context: int
    advantages: torch.Tensor
    old: torch.Tensor | None
    """Log-probs at generation; None when no optimizer step can come before the batch is used up."""
    ref: torch.Tensor | None
    """The reference's log-probs; None without a KL term."""
    tokens: float
    """Completion tokens of the whole batch."""
    summary: torch.Tensor
    """(N, len(SUMMARY) + functions) float64: SUMMARY, then each function's score (NaN: not scored)."""


@dataclass
class Interval:
    """What was trained since the last log."""

    tallies: list[torch.Tensor] = field(default_factory=list)
    clips: list[torch.Tensor] = field(default_factory=list)
    """(B, 3) per pass: each row's low and high clip fraction, and whether it has a token."""
    completions: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    """(generation, row) -> its summary row, each completion once."""


class TinyGRPO:
    """GRPO on a policy, an optional frozen reference, named reward functions and a prompt set."""

    def __init__(
        self,
        settings: Settings,
        policy: nn.Module,
        ref_policy: nn.Module | None,
        rewards: Mapping[str, RewardFn],
        prompts: torch.Tensor,
        pad_id: int,
        stop_id: int,
    ) -> None:
        s = settings
        if s.kl_weight != 0 and ref_policy is None:
            raise ValueError(f"kl_weight={s.kl_weight} needs a reference policy")
        weights = s.reward_weights or (1.0,) * len(rewards)
        if not rewards or len(weights) != len(rewards):
            raise ValueError(f"{len(weights)} reward weights for {len(rewards)} reward functions")
        self.s, self.policy, self.ref_policy, self.rewards = s, policy, ref_policy, dict(rewards)
        self.weights = torch.tensor(weights, dtype=torch.float64)
        self.prompts, self.pad_id, self.stop_id = prompts, pad_id, stop_id
        # eval mode for good: no dropout acts in any forward pass, so at LR 0 every ratio is 1
        for model in (policy, ref_policy):
            if model is not None:
                model.eval()
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=s.lr, eps=1e-5, weight_decay=0.0)
        self.prompt_order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(s.seed))
        self.shuffle = torch.Generator().manual_seed(s.seed + 1)
        self.step = 0
        """Optimizer steps so far (during a window: its index)."""
        self.generations = 0
        self.interval = Interval()
        self.history: list[dict[str, float]] = []

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def logits(self, model: nn.Module, seqs: torch.Tensor, context: int) -> torch.Tensor:
        """Temperature-scaled logits of the completion positions (each read at the token before it)."""
        out = model(**model_inputs(seqs, self.pad_id), return_dict=True)
        return out.logits[:, context - 1 : -1] / self.s.temperature

    # -- generation -------------------------------------------------------

    @torch.no_grad()
    def sample(self, queries: torch.Tensor) -> torch.Tensor:
        """`new_tokens` tokens per query, padded after an early stop; seeded by the seed and the generation."""
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
        devices = [] if self.device.type == "cpu" else [self.device]
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.s.seed * 1_000_003 + self.generations)
            out = self.policy.generate(
                input_ids=queries, attention_mask=(queries != self.pad_id).long(), generation_config=how
            )
        ids = out[:, queries.shape[1] :]
        return nn.functional.pad(ids, (0, self.s.new_tokens - ids.shape[1]), value=self.pad_id)

    @torch.no_grad()
    def generate(self) -> Generation:
        """Sample, score and compute advantages; the old and reference log-probs when they are needed."""
        s = self.s
        per_generation = s.generation_rows // s.group_size
        start = self.generations * per_generation
        pick = self.prompt_order[torch.arange(start, start + per_generation) % len(self.prompts)]
        queries = self.prompts[pick].to(self.device).repeat_interleave(s.group_size, dim=0)
        ids = self.sample(queries)
        seqs = torch.cat([queries, ids], dim=1)
        mask, stopped = completion_mask(ids, self.stop_id, s.drop_truncated)
        context = queries.shape[1]
        old, ref = [], []
        for rows in torch.arange(len(ids), device=ids.device).split(s.rows_per_pass):
            if len(s.windows) > 1:  # the policy moves before the last window of this generation
                old.append(token_logprobs(self.logits(self.policy, seqs[rows], context), ids[rows]))
            if s.kl_weight != 0:
                ref.append(token_logprobs(self.logits(self.ref_policy, seqs[rows], context), ids[rows]))
        # the reward functions see each completion cut after its stop token
        cut = ids.masked_fill(~completion_mask(ids, self.stop_id, False)[0], self.pad_id)
        scores = torch.stack([as_scores(fn(queries, cut), len(ids)) for fn in self.rewards.values()], dim=1)
        rewards = (scores * self.weights).nansum(dim=1).masked_fill(scores.isnan().all(dim=1), math.nan)
        advantages, zero_std = advantages_of(rewards, s.group_size, s.scale_rewards)
        ended = (stopped & mask.any(dim=1)).cpu()
        summary = torch.stack([mask.sum(1).double().cpu(), ended.double(), rewards, zero_std.double()], dim=1)
        batch = Generation(
            index=self.generations,
            seqs=seqs,
            ids=ids,
            mask=mask,
            context=context,
            advantages=advantages.to(self.device, torch.float32),
            old=torch.cat(old) if old else None,
            ref=torch.cat(ref) if ref else None,
            tokens=float(mask.sum()),
            summary=torch.cat([summary, scores], dim=1),
        )
        self.generations += 1
        return batch

    # -- the loss of one pass ---------------------------------------------

    def per_token_loss(self, logp, old, adv, mask):
        """(l_t without the KL, the ratio the KL is corrected by, flags) under `loss_type`; `adv` is (B, 1)."""
        s = self.s
        ratio = torch.exp(logp - old)
        none = torch.zeros_like(mask)
        flags = {"low": none, "high": none, "cispo": none, "phi": torch.ones_like(adv[:, 0])}
        if s.loss_type in HARD_CLIP:
            capped = ratio if s.ratio_cap is None else ratio.clamp(max=s.ratio_cap)
            clipped = ratio.clamp(1 - s.clip_low, 1 + s.clip_high)
            flags["low"] = (capped < 1 - s.clip_low) & (adv < 0)
            flags["high"] = (capped > 1 + s.clip_high) & (adv > 0)
            return -torch.min(capped * adv, clipped * adv), capped, flags
        if s.loss_type == "cispo":  # the capped weight carries no gradient
            flags["cispo"] = (ratio > s.clip_high) & (adv > 0)
            return -ratio.clamp(max=s.clip_high).detach() * adv * logp, ratio, flags
        if s.loss_type == "sapo":
            tau = torch.where(adv > 0, s.sapo_tau[0], s.sapo_tau[1])
            return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv, ratio, flags
        with torch.no_grad():  # vespo: one weight per completion, from its sequence importance weight
            log_w = ((logp - old).clamp(-20.0, 20.0) * mask).sum(dim=1, keepdim=True).clamp(*LOG_W_BOUNDS)
            k = torch.where(adv >= 0, s.vespo_pos[0], s.vespo_neg[0])
            lam = torch.where(adv >= 0, s.vespo_pos[1], s.vespo_neg[1])
            phi = torch.exp(lam + k * log_w - lam * log_w.exp()).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        flags["phi"] = phi[:, 0]
        return -phi * adv * logp, ratio, flags

    def pass_loss(self, batch: Generation, rows: torch.Tensor, normaliser: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward of `rows`; the loss is its share of the window's (divided by `normaliser`).
        Returns its TALLY row and its (B, 3) clip rows."""
        s = self.s
        mask, ids, adv = batch.mask[rows], batch.ids[rows], batch.advantages[rows].unsqueeze(1)
        weight = mask.to(torch.float32)
        logits = self.logits(self.policy, batch.seqs[rows], batch.context)
        logp = token_logprobs(logits, ids)
        old = logp.detach() if batch.old is None else batch.old[rows]
        loss_t, kl_ratio, flags = self.per_token_loss(logp, old, adv, mask)
        kl = None
        if s.kl_weight != 0:
            gap = batch.ref[rows] - logp
            kl = gap.exp() - gap - 1
            if s.kl_times_ratio:
                kl = kl * kl_ratio
            loss_t = loss_t + s.kl_weight * kl
        tokens_per_row = weight.sum(dim=1)
        token_sum = (loss_t * weight).sum()
        row_means = (loss_t * weight).sum(dim=1) / tokens_per_row.clamp(min=1)
        pass_mean = token_sum / tokens_per_row.sum().clamp(min=1)
        if s.loss_type in ("grpo", "sapo"):
            numerator = row_means.sum()
        elif s.loss_type == "bnpo":
            numerator = pass_mean
        else:
            numerator = token_sum
        (numerator / normaliser).backward()
        with torch.no_grad():
            entropy = token_entropy(logits)
            w = weight.double()

            def summed(x):
                return (x.double() * w).sum() if x is not None else torch.zeros((), dtype=w.dtype, device=w.device)

            low, high = flags["low"], flags["high"]
            sums = [summed(entropy), summed(kl), summed(low), summed(high), summed(low | high), summed(flags["cispo"])]
            counts = [w.sum(), torch.tensor(float(len(rows))), torch.tensor(1.0)]
            tally = torch.stack(
                [
                    *sums,
                    flags["phi"].double().sum(),
                    token_sum.double(),
                    row_means.double().sum(),
                    pass_mean.double(),
                    *[c.to(w) for c in counts],
                ]
            )
            per_row = w.sum(dim=1).clamp(min=1)
            clips = torch.stack([(low * w).sum(1) / per_row, (high * w).sum(1) / per_row, (w.sum(1) > 0).double()], 1)
            return tally.cpu(), clips.cpu()

    def normaliser(self, batch: Generation, windows: Sequence[torch.Tensor]) -> float:
        """What the summed pass numerators of one window are divided by, so that its loss is the loss type's."""
        s = self.s
        completions = float(sum(len(rows) for rows in windows))
        if s.loss_type in ("grpo", "sapo", "luspo"):
            return max(completions, 1.0)
        if s.loss_type == "bnpo":
            return float(len(windows))
        if s.loss_type == "dr_grpo":
            return max(completions, 1.0) * s.new_tokens
        return max(batch.tokens, 1.0) * len(windows) / s.generation_passes  # the window's share of the batch

    def window(self, batch: Generation, passes: Sequence[torch.Tensor]) -> None:
        """Every pass of one window, then one optimizer step."""
        normaliser = self.normaliser(batch, passes)
        for rows in passes:
            tally, clips = self.pass_loss(batch, rows, normaliser)
            self.interval.tallies.append(tally)
            self.interval.clips.append(clips)
            for row in rows.tolist():
                self.interval.completions.setdefault((batch.index, row), batch.summary[row])
        if self.s.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.s.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    # -- statistics -------------------------------------------------------

    def pool(self, tallies: torch.Tensor) -> dict[str, float]:
        """The token means, vespo's weight and the policy loss: sums over the interval, divided once."""
        s, total = self.s, dict(zip(TALLY, tallies.sum(dim=0)))

        def ratio(numerator: str, count: torch.Tensor) -> float:
            return float(total[numerator] / count) if count > 0 else 0.0

        tokens, completions = total["tokens"], total["completions"]
        names = ["entropy", *(["kl"] if s.kl_weight != 0 else [])]
        names += {"cispo": ["cispo_clip_ratio"]}.get(s.loss_type, TOKEN_MEANS[2:5] if s.loss_type in HARD_CLIP else [])
        out = {name: ratio(name, tokens) for name in names}
        if s.loss_type == "vespo":
            out["vespo/phi_seq_mean"] = ratio("phi", completions)
        loss = {
            "grpo": ("loss_completions", completions),
            "sapo": ("loss_completions", completions),
            "bnpo": ("loss_pass", total["passes"]),
            "dr_grpo": ("loss_tokens", completions * s.new_tokens),
            "luspo": ("loss_tokens", completions),
        }.get(s.loss_type, ("loss_tokens", tokens))
        out["policy_loss"] = ratio(*loss)
        return out

    def summarize(self, interval: Interval) -> dict[str, float]:
        """Every statistic of one interval."""
        out = self.pool(torch.stack(interval.tallies))
        if self.s.loss_type in HARD_CLIP:
            clips = torch.cat(interval.clips)
            kept = clips[clips[:, 2] > 0]
            out["clip_ratio/low_min"] = float(kept[:, 0].min()) if len(kept) else 0.0
            out["clip_ratio/high_max"] = float(kept[:, 1].max()) if len(kept) else 0.0
        rows = torch.stack(list(interval.completions.values()))
        length, stopped, reward, zero_std = rows[:, : len(SUMMARY)].unbind(dim=1)
        ended = length[stopped > 0]
        out.update(
            {
                "completions/mean_length": float(length.mean()),
                "completions/min_length": float(length.min()),
                "completions/max_length": float(length.max()),
                "completions/clipped_ratio": float((stopped == 0).double().mean()),
                "completions/mean_terminated_length": float(ended.mean()) if len(ended) else 0.0,
                "completions/min_terminated_length": float(ended.min()) if len(ended) else 0.0,
                "completions/max_terminated_length": float(ended.max()) if len(ended) else 0.0,
                "reward": finite_or_zero(reward.nanmean()),
                "reward_std": finite_or_zero(nan_std(reward)),
                "frac_reward_zero_std": float(zero_std.mean()),
            }
        )
        for i, name in enumerate(self.rewards):
            scores = rows[:, len(SUMMARY) + i]
            out[f"rewards/{name}/mean"] = finite_or_zero(scores.nanmean())
            out[f"rewards/{name}/std"] = finite_or_zero(nan_std(scores))
        return out

    def log(self) -> None:
        metrics = self.summarize(self.interval)
        metrics["step"] = self.step
        self.interval = Interval()
        self.history.append(metrics)

    # -- the loop ---------------------------------------------------------

    def passes(self) -> list[torch.Tensor]:
        """The rows of every pass over one generation: `reuse` times one shuffle, cut into passes."""
        order = torch.randperm(self.s.generation_rows, generator=self.shuffle).to(self.device)
        return list(order.split(self.s.rows_per_pass)) * self.s.reuse

    def train(self) -> list[dict[str, float]]:
        """`steps` optimizer steps; one dict of statistics per logged interval."""
        s = self.s
        while self.step < s.steps:
            batch = self.generate()
            passes, first = self.passes(), 0
            for size in s.windows:
                if self.step >= s.steps:
                    break
                self.window(batch, passes[first : first + size])
                first += size
                self.step += 1
                if self.step % s.log_every == 0:
                    self.log()
        if self.interval.tallies:
            self.log()
        return self.history
