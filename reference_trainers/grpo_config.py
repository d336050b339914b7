"""The GRPO trainer's one configuration object and the sizes derived from it (no torch needed)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .ppo_config import ConfigError, exact_div

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
"""The loss types with a hard clip of the ratio: they log the clip_ratio metrics (cispo logs its own)."""
SCALE_REWARDS = ("group", "batch", "none")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
LR_SCHEDULER_TYPES = ("constant", "constant_with_warmup", "linear", "cosine")
"""transformers' `get_scheduler` names the trainer takes: the learning rate over `max_steps` optimizer steps."""
"""TRL's `multi_objective_aggregation`: weight and sum the functions' scores, then normalise the sum; or normalise
each function's scores within its group first, sum them weighted, and normalise that over the batch (GDPO)."""
"""TRL's `importance_sampling_level`: a ratio per token, or one per completion (GSPO, arXiv 2507.18071)."""


@dataclass
class GRPOConfig:
    """GRPO hyper-parameters and batch geometry (TRL's names and meanings where TRL has the field)."""

    per_device_train_batch_size: int = 4
    """Completions per micro-batch (one forward and backward pass)."""
    gradient_accumulation_steps: int = 2
    """Micro-batches per optimizer step (an accumulation window); a generation's last window may be shorter."""
    steps_per_generation: int | None = None
    """Micro-batches per generation batch on each rank; None means gradient_accumulation_steps (as TRL)."""
    num_generations: int = 4
    """Completions sampled per prompt (a group); advantages are relative to the group."""
    num_iterations: int = 1
    """Passes over each generation batch before the next one is sampled (TRL's mu)."""
    max_steps: int = 1
    """Optimizer steps that `train()` runs."""
    logging_steps: int = 1
    """Optimizer steps per logging interval; the statistics of an interval are pooled over all of it."""
    learning_rate: float = 1e-3
    """AdamW learning rate; 0 keeps the policy fixed, so every ratio is 1."""
    lr_scheduler_type: str = "constant"
    """The learning rate's schedule over the `max_steps` optimizer steps (LR_SCHEDULER_TYPES), advanced once per
    optimizer step, after it."""
    warmup_steps: int = 0
    """Optimizer steps over which the rate rises linearly from 0 (not read by `constant`)."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay, on every weight."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    """AdamW's betas: the decay rates of its first and second moment estimates, each in [0, 1)."""
    adam_epsilon: float = 1e-5
    """AdamW's eps, added to the root of the second moment (> 0)."""
    max_completion_length: int = 12
    """New tokens sampled per completion; also the constant of the dr_grpo normalisation."""
    temperature: float = 1.0
    """Sampling temperature; logits are divided by it everywhere (sampling, log-probs, entropy)."""
    stop_token_id: int | None = None
    """Completions end after the first occurrence of this token (None: every completion runs to full length)."""
    loss_type: str = "dapo"
    """The per-token loss and how it becomes one loss: one of LOSS_TYPES (docs/grpo-metrics.md, section 4)."""
    beta: float = 0.0
    """Weight of the k3 KL to the reference model in the loss; 0 skips the reference model and the `kl` metric."""
    use_bias_correction_kl: bool = True
    """Multiply the per-token KL by the importance ratio (TRL's default), in the loss and in the logged `kl`."""
    epsilon_low: float = 0.2
    """The ratio is clipped below at 1 - epsilon_low (TRL's `epsilon`)."""
    epsilon_high: float = 0.2
    """The ratio is clipped above at 1 + epsilon_high; cispo caps its importance weight at epsilon_high itself."""
    importance_sampling_level: str = "token"
    """'token': each token's ratio exp(logp - old_logp); 'sequence' (GSPO): one ratio per completion, exp of the mean
    of its tokens' log-ratios over its mask, which every token of the completion takes (and is clipped with)."""
    mask_truncated_completions: bool = False
    """Leave a completion without the stop token in its mask (truncated) out of the loss: its mask is emptied after
    it is scored (TRL's option); its length statistics, reward and advantage stay those of what was sampled."""
    delta: float | None = None
    """When set, the unclipped ratio is also capped at delta (TRL's two-sided clipping, INTELLECT-2)."""
    off_policy_mask_threshold: float | None = None
    """When set, a completion of negative advantage whose mean over its mask of old_logp - logp (the KL of the policy
    that drew it to the current one, estimated at its tokens) exceeds this loses its policy term; the KL term stays
    (TRL's option, DeepSeek-V3.2's off-policy sequence mask). None (the default): no completion is masked."""
    top_entropy_quantile: float = 1.0
    """Keep the policy term of the loss only at the tokens whose entropy is at or above the (1 - this) quantile of
    the micro-batch's completion tokens, every rank's (TRL's option, "Beyond the 80/20 Rule"); the KL term stays on
    every token. 1.0 (the default) keeps every token's."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (TRL's option): the loss is the policy objective minus entropy_coef times the mean
    per-token entropy of the optimizer step's window, its completion tokens on every rank (those of the policy term
    under the entropy mask), so the micro-batch cut never moves it. 0.0 (the default): no bonus."""
    use_adaptive_entropy: bool = False
    """Adjust the entropy bonus's coefficient after every optimizer step (TRL's option, Skywork-OR1's adaptive
    entropy control), entropy_coef its first value: up by entropy_coef_delta (at most entropy_coef_max) where the
    step's window's mean entropy over its bonus tokens on every rank is at or below entropy_target, else down by it
    (at least entropy_coef_min). A window applies the coefficient only where the previous window's mean entropy was
    at or below the target: none before the first step."""
    entropy_coef_min: float = 0.0
    """The adaptive coefficient's floor (TRL's default)."""
    entropy_coef_max: float = 1.0
    """The adaptive coefficient's ceiling (TRL's default)."""
    entropy_coef_delta: float = 0.005
    """The adaptive coefficient's step (TRL's default)."""
    entropy_target: float = 0.2
    """The mean per-token entropy, in nats, at or below which the adaptive coefficient is applied and grows (TRL's
    default)."""
    sapo_temperature_pos: float = 1.0
    """sapo's gate temperature for tokens of positive advantage (TRL's default)."""
    sapo_temperature_neg: float = 1.05
    """sapo's gate temperature for tokens of non-positive advantage (TRL's default)."""
    vespo_k_pos: float = 2.0
    """vespo's power k of the sequence weight for non-negative advantages (TRL's default)."""
    vespo_lambda_pos: float = 3.0
    """vespo's decay lambda for non-negative advantages (TRL's default)."""
    vespo_k_neg: float = 3.0
    """vespo's power k for negative advantages (TRL's default)."""
    vespo_lambda_neg: float = 2.0
    """vespo's decay lambda for negative advantages (TRL's default)."""
    scale_rewards: str = "group"
    """Divide advantages by the group's reward std ('group'), the generation batch's ('batch') or not ('none')."""
    reward_weights: tuple[float, ...] | None = None
    """One weight per reward function (None: all 1.0); the reward is the weighted sum."""
    multi_objective_aggregation: str = "sum_then_normalize"
    """How several reward functions make one advantage (MULTI_OBJECTIVE_AGGREGATIONS); with 'normalize_then_sum'
    scale_rewards is not read (TRL's GRPOTrainer)."""
    seed: int = 0
    """Seeds torch, numpy and python (transformers.set_seed), the prompt order and the shuffles."""
    max_grad_norm: float | None = None
    """Clip the gradient norm at each optimizer step (None: no clipping)."""
    windows_across_generations: bool = False
    """Let an accumulation window run on past its generation's end into the next generation's micro-batches (TRL's
    one step counter over a prompt set of several generation batches): every window then holds
    gradient_accumulation_steps micro-batches. False: each generation's last window ends with it (`window_sizes`)."""

    # derived once in __post_init__
    local_generation_batch_size: int = field(init=False)
    """Completions generated per rank per generation: per_device_train_batch_size * steps_per_generation."""
    prompts_per_generation: int = field(init=False)
    """Prompts per rank per generation: local_generation_batch_size / num_generations."""
    window_sizes: tuple[int, ...] = field(init=False)
    """Micro-batches of each accumulation window of one generation, in order, e.g. (3, 1) for 3 and 4."""

    def __post_init__(self) -> None:
        if self.steps_per_generation is None:
            self.steps_per_generation = self.gradient_accumulation_steps
        if isinstance(self.scale_rewards, bool):  # TRL accepts True / False for 'group' / 'none'
            self.scale_rewards = "group" if self.scale_rewards else "none"
        positive = (
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "steps_per_generation",
            "num_generations",
            "num_iterations",
            "max_steps",
            "logging_steps",
            "max_completion_length",
        )
        bad = [f"{name}={getattr(self, name)}" for name in positive if getattr(self, name) <= 0]
        if bad:
            raise ConfigError("these sizes must be positive integers: " + ", ".join(bad))  # pragma: no mutate - message
        if self.num_generations < 2:
            raise ConfigError(  # pragma: no mutate - message
                f"num_generations must be at least 2 (a group), got {self.num_generations}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(  # pragma: no mutate - message
                f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}"
            )
        if self.scale_rewards not in SCALE_REWARDS:
            raise ConfigError(  # pragma: no mutate - message
                f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}, got {self.scale_rewards!r}"
            )
        if self.multi_objective_aggregation not in MULTI_OBJECTIVE_AGGREGATIONS:
            raise ConfigError(  # pragma: no mutate - message
                f"multi_objective_aggregation must be one of {', '.join(MULTI_OBJECTIVE_AGGREGATIONS)}, "
                f"got {self.multi_objective_aggregation!r}"
            )
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be positive, got {self.temperature}")  # pragma: no mutate - message
        if self.learning_rate < 0:
            raise ConfigError(f"learning_rate must be >= 0, got {self.learning_rate}")  # pragma: no mutate - message
        if self.beta < 0:
            raise ConfigError(f"beta must be >= 0, got {self.beta}")  # pragma: no mutate - message
        if self.lr_scheduler_type not in LR_SCHEDULER_TYPES or self.warmup_steps < 0 or self.weight_decay < 0:
            raise ConfigError(  # pragma: no mutate - message
                f"lr_scheduler_type must be one of {', '.join(LR_SCHEDULER_TYPES)}, warmup_steps and weight_decay "
                f">= 0, got {self.lr_scheduler_type!r}, {self.warmup_steps} and {self.weight_decay}"
            )
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1 and self.adam_epsilon > 0):
            raise ConfigError(  # pragma: no mutate - message
                f"adam_beta1 and adam_beta2 must be in [0, 1) and adam_epsilon > 0, got {self.adam_beta1}, "
                f"{self.adam_beta2} and {self.adam_epsilon}"
            )
        if not 0 <= self.epsilon_low < 1 or self.epsilon_high < 0:
            raise ConfigError(  # pragma: no mutate - message
                f"epsilon_low must be in [0, 1) and epsilon_high >= 0, got {self.epsilon_low} and {self.epsilon_high}"
            )
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise ConfigError(  # pragma: no mutate - message
                f"importance_sampling_level must be one of {', '.join(IMPORTANCE_SAMPLING_LEVELS)}, "
                f"got {self.importance_sampling_level!r}"
            )
        soft = ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos", "vespo_lambda_neg")
        bad = [f"{name}={getattr(self, name)}" for name in soft if getattr(self, name) <= 0]
        if bad:
            raise ConfigError("these must be positive: " + ", ".join(bad))  # pragma: no mutate - message
        if not 0 <= self.top_entropy_quantile <= 1:
            raise ConfigError(  # pragma: no mutate - message
                f"top_entropy_quantile must be in [0, 1], got {self.top_entropy_quantile}"
            )
        if not 0 <= self.entropy_coef < float("inf"):
            raise ConfigError(  # pragma: no mutate - message
                f"entropy_coef must be finite and >= 0, got {self.entropy_coef}"
            )
        adaptive = (self.entropy_coef_min, self.entropy_coef_max, self.entropy_coef_delta, self.entropy_target)
        if not (all(math.isfinite(v) for v in adaptive) and 0 <= self.entropy_coef_min <= self.entropy_coef_max
                and self.entropy_coef_delta >= 0):  # fmt: skip
            raise ConfigError(  # pragma: no mutate - message
                f"entropy_coef_min, entropy_coef_max, entropy_coef_delta and entropy_target must be finite, with "
                f"0 <= min <= max and delta >= 0, got {adaptive}"
            )
        if self.delta is not None and self.delta <= 0:
            raise ConfigError(f"delta must be positive or None, got {self.delta}")  # pragma: no mutate - message
        if self.off_policy_mask_threshold is not None and not 0 < self.off_policy_mask_threshold < float("inf"):
            raise ConfigError(  # pragma: no mutate - message
                f"off_policy_mask_threshold must be positive and finite or None, got {self.off_policy_mask_threshold}"
            )
        self.local_generation_batch_size = self.per_device_train_batch_size * self.steps_per_generation
        self.prompts_per_generation = exact_div(
            self.local_generation_batch_size,
            self.num_generations,
            "each rank's generation batch "  # pragma: no mutate - message
            "(per_device_train_batch_size * steps_per_generation "  # pragma: no mutate - message
            f"= {self.per_device_train_batch_size} * {self.steps_per_generation}) "
            "must be a multiple of num_generations",  # pragma: no mutate - message
        )
        micro_steps = self.steps_per_generation * self.num_iterations
        full, rest = divmod(micro_steps, self.gradient_accumulation_steps)
        self.window_sizes = (self.gradient_accumulation_steps,) * full + ((rest,) if rest else ())
