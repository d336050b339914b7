"""GRPOSpec: everything a GRPO target needs to build and run a trainer for one scenario.

The trainer settings carry the names of TRL's GRPOConfig (and `reference_ppo.grpo_config`'s),
so that a target reads `spec.per_device_train_batch_size` and the like without a table of
its own; `name`, `seed`, `device` and `dtype` say which run it is, and the toy-world fields
size the built-in world. The geometry a run must have (windows, logs) is derived here,
independently of any trainer's config class, and sizes that cannot work are a usage error
(HarnessConfigError, exit 2) before any model is built.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from harness import settings
from harness.errors import HarnessConfigError
from harness.oracle.schedules import KINDS as LR_SCHEDULER_TYPES

from .instruments import INSTRUMENTS

if TYPE_CHECKING:
    from harness.instrument.observe import Instruments

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
"""TRL's eight loss types (docs/grpo-metrics.md, section 4)."""
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
"""The loss types with a hard clip of the ratio, which log the clip_ratio metrics."""
CUT_INVARIANT_LOSS_TYPES = tuple(t for t in LOSS_TYPES if t != "bnpo")
"""The loss types whose objective over a generation batch does not depend on how it is cut into micro-batches
(bnpo normalises each micro-batch by its own tokens: TRL's "local batch")."""
SOFT_SETTINGS = ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
                 "vespo_lambda_neg")  # fmt: skip
"""The settings of the sapo and vespo loss types (TRL's names and defaults)."""
ADAM = ("adam_beta1", "adam_beta2", "adam_epsilon")
"""AdamW's settings a spec may declare (TRL's names; None: the trainer's own defaults, not handed over)."""
ADAPTIVE = ("use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")
"""TRL's adaptive entropy control (its names and defaults), handed over where use_adaptive_entropy is on."""
SCALE_REWARDS = ("group", "batch", "none")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
"""TRL's `importance_sampling_level`: a ratio per token, or one per completion (GSPO)."""
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
"""TRL's `multi_objective_aggregation` (docs/grpo-metrics.md, "Advantages")."""
REWARD_ORDERS = ("as_listed", "reversed")
"""The orders a target hands its trainer the two toy reward functions in (`GRPOSpec.reward_order`)."""
SETTINGS = (
    "temperature",
    "loss_type",
    "beta",
    "use_bias_correction_kl",
    "epsilon_low",
    "epsilon_high",
    *SOFT_SETTINGS,
    "scale_rewards",
    "multi_objective_aggregation",
    "max_grad_norm",
    "dropout",
)
"""The trainer settings `verify --set KEY=VALUE` may change for the whole GRPO gate."""
REFUSED = {
    "delta": "TRL corrects the KL by the ratio before its delta cap, the contract by the capped one, an open question "
    "of the contract: only the logp_gradient cases of run=delta run it, at beta 0 (docs/gate.md)",
    "top_entropy_quantile": "the entropy mask's threshold is each micro-batch's own quantile, so the objective depends "
    "on the cut and the partition checks would fail a right trainer: only logp_gradient[run=top_entropy] runs it "
    "(docs/gate.md)",
    "off_policy_mask_threshold": "the mask drops a completion by how far the policy moved since it was drawn, which "
    "each check's run decides: only logp_gradient[run=off_policy_mask] runs it (docs/gate.md)",
}
"""Trainer settings that `--set` refuses, and why."""


@dataclass(frozen=True)
class GRPOSpec:
    """One GRPO trainer run, described without reference to any trainer's own config class."""

    instruments: ClassVar[Instruments] = INSTRUMENTS
    """What observe installs around a run of this spec (its algorithm's instruments, instruments.py)."""
    name: str = "uneven_lengths"
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    # trainer settings: TRL's GRPOConfig names
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 2
    steps_per_generation: int | None = None
    """Micro-batches per generation batch on each rank; None means gradient_accumulation_steps (as TRL)."""
    num_generations: int = 4
    num_iterations: int = 1
    max_steps: int = 2
    logging_steps: int = 1
    learning_rate: float = 1e-3
    max_completion_length: int = 12
    temperature: float = 1.0
    loss_type: str = "dapo"
    beta: float = 0.04
    """KL weight; not TRL's default 0, so that `kl` is logged and checked (`--set beta=0` turns it off)."""
    use_bias_correction_kl: bool = True
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    delta: float | None = None
    mask_truncated_completions: bool = False
    """TRL's option: a completion without the stop token in its mask (truncated) is left out of the loss, its mask
    emptied; it is still scored and counted in the length statistics."""
    importance_sampling_level: str = "token"
    """'sequence' (GSPO): one ratio per completion, exp of the mean of its tokens' log-ratios over its mask, on every
    token of it; its clip flags pool over completions (docs/grpo-metrics.md, section 2)."""
    top_entropy_quantile: float = 1.0
    """TRL's option: only the tokens whose entropy is at or above the (1 - top_entropy_quantile) quantile of their
    micro-batch's tokens (every rank's) keep their policy term in the loss; the KL term stays on every token. 1.0:
    every token keeps it (docs/grpo-metrics.md, section 4)."""
    off_policy_mask_threshold: float | None = None
    """TRL's option: a completion of negative advantage whose mean old_logp - logp over its mask exceeds it loses its
    policy term; the KL term stays (docs/grpo-metrics.md, section 4). None: no completion is masked."""
    entropy_coef: float = 0.0
    """TRL's option: the loss less entropy_coef times the mean per-token entropy of the optimizer step's window, its
    tokens on every rank (docs/grpo-metrics.md, section 4). 0.0: no entropy bonus."""
    use_adaptive_entropy: bool = False
    """TRL's option (Skywork-OR1): entropy_coef is the bonus's first coefficient, moved by entropy_coef_delta after
    each step (up where the window's mean entropy is at or below entropy_target, else down, within entropy_coef_min
    and entropy_coef_max) and applied only after a window at or below the target (docs/grpo-metrics.md, section 4)."""
    entropy_coef_min: float = 0.0
    entropy_coef_max: float = 1.0
    entropy_coef_delta: float = 0.005
    entropy_target: float = 0.2
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    scale_rewards: str = "group"
    reward_weights: tuple[float, ...] | None = None
    """One weight per toy reward function. None or one weight: one function, which scores every completion; two:
    two functions, each of which cannot score some completions, and some completions neither can (the targets'
    toy rewards; the reward is the weighted sum over the functions that scored)."""
    multi_objective_aggregation: str = "sum_then_normalize"
    """How two reward functions make one advantage: their weighted sum normalised as `scale_rewards` says, or
    ('normalize_then_sum', GDPO) each function's scores normalised in its group, summed weighted, and that sum
    normalised over the generation batch (`scale_rewards` then not read)."""
    reward_order: str = "as_listed"
    """The order the target hands its trainer the two toy reward functions in: 'as_listed' (the count first, the
    stop reward second, as `reward_weights` lists their weights) or 'reversed' (the stop reward first), each
    function with its own weight (`handed_weights`), so that a trainer that pairs the weights with its functions
    in another order than it was handed them (sorted by name, say) shows."""
    reward_model: bool = False
    """The second of two reward functions is the toy world's reward model (a sequence-classification model),
    handed to the trainer as a module and watched by the target's `RewardTap.watch`; the first scores every
    completion."""
    max_grad_norm: float | None = None
    windows_across_generations: bool = False
    """Whether an accumulation window runs on past its generation's end into the next generation's micro-batches
    (TRL's one step counter over a prompt set of several generation batches): every window then holds
    gradient_accumulation_steps micro-batches, whichever generations they come from. False: each generation's last
    window ends with it (`window_sizes`). A target whose windows always end with their generation declares the
    runs that set it not applicable (`run=across_generations`); the verl and openrlhf targets also refuse it."""
    lr_scheduler_type: str = "constant"
    """The learning-rate schedule over max_steps (harness/oracle/schedules.py: constant, constant_with_warmup,
    linear, cosine, as transformers' get_scheduler defines them); TRL's default is linear, the gate's constant."""
    warmup_steps: int = 0
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay (TRL's default 0.0)."""
    adam_beta1: float | None = None
    adam_beta2: float | None = None
    adam_epsilon: float | None = None
    """AdamW's betas and eps (TRL's names), set together or not at all. None: the trainer's own defaults, not judged
    (TRL's 0.9, 0.999 and 1e-8; the reference GRPO trainer's eps is 1e-5); set, every param group must hold them
    (`optimizer_settings`, `lr_schedule`)."""
    # the built-in toy world
    vocab_size: int = 32
    prompt_length: int = 6
    num_prompts: int = 48
    prompt_pads: int = 0
    """Left padding of the prompts: prompt i starts with i % (prompt_pads + 1) pad tokens (PPO's field)."""
    pad_logit_bias: float = 0.0
    """Added to the policy's pad-token logit, so that some completions are empty (all-masked rows)."""
    stop_logit_bias: float = 0.0
    """Added to the policy's stop-token logit, so that completions end early (0: the toy world's own odds; the
    trl-grpo target then adds its own EOS bias)."""
    dropout: float = 0.0
    """Attention dropout of every toy model: a trainer must not let it act (at LR 0 no token is clipped)."""
    # how the harness judges the run (no trainer reads it)
    partial_last_logged: bool = True
    """Whether a partial last logging interval (max_steps not a multiple of logging_steps) is one of the run's logs:
    the `schedule` check judges a run its target declares may leave it unlogged (`partial_last_interval`,
    definitions.py) with False."""

    def with_(self, **changes) -> GRPOSpec:
        """A copy with `changes`."""
        return replace(self, **changes)

    def as_dict(self) -> dict:
        """Plain data."""
        return asdict(self)

    @property
    def handed_weights(self) -> tuple[float, ...] | None:
        """`reward_weights` in the order the target hands the functions over (`reward_order`): the place of each
        weight is that of its function in the trainer's list, and of its `RewardCall.index`. None when no weights
        are given."""
        if self.reward_weights is None:
            return None
        weights = tuple(self.reward_weights)
        return weights[::-1] if self.reward_order == "reversed" else weights

    @property
    def optimizer_settings(self) -> dict[str, object]:
        """The param-group settings the run declares ({} where it declares none): AdamW's betas and eps."""
        if self.adam_beta1 is None:
            return {}
        return {"betas": (self.adam_beta1, self.adam_beta2), "eps": self.adam_epsilon}

    @property
    def generation_steps(self) -> int:
        """steps_per_generation as the trainer resolves it (None: gradient_accumulation_steps)."""
        return self.steps_per_generation or self.gradient_accumulation_steps

    @property
    def generation_batch(self) -> int:
        """Completions per generation on one rank: per_device_train_batch_size * steps_per_generation."""
        return self.per_device_train_batch_size * self.generation_steps

    @property
    def window_sizes(self) -> tuple[int, ...]:
        """Micro-batches of each accumulation window of one generation; a generation's last may be shorter."""
        micro_steps = self.generation_steps * self.num_iterations
        full, rest = divmod(micro_steps, self.gradient_accumulation_steps)
        return (self.gradient_accumulation_steps,) * full + ((rest,) if rest else ())

    def run_windows(self) -> list[int]:
        """Micro-batches of every optimizer step of the run, in order (max_steps of them)."""
        if self.windows_across_generations:
            return [self.gradient_accumulation_steps] * self.max_steps
        out: list[int] = []
        while len(out) < self.max_steps:
            out += self.window_sizes
        return out[: self.max_steps]

    @property
    def total_logs(self) -> int:
        """Logged intervals: one per logging_steps optimizer steps, and one for a partial last interval (unless
        `partial_last_logged` is False)."""
        whole = self.max_steps // self.logging_steps
        return whole + (1 if self.max_steps % self.logging_steps and self.partial_last_logged else 0)

    def interval_of(self, window: int) -> int:
        """The logging interval (0-based) that optimizer step `window` (0-based) belongs to."""
        return window // self.logging_steps

    @property
    def split_label(self) -> str:
        """`bs=4,gas=2,spg=2,iters=1`: the cut of the generation batch, as failure lines name it."""
        return (
            f"bs={self.per_device_train_batch_size},gas={self.gradient_accumulation_steps},"
            f"spg={self.generation_steps},iters={self.num_iterations}"
        )

    def validate(self) -> None:
        """Reject settings no GRPO trainer can run, before any model work (HarnessConfigError, exit 2)."""
        sizes = {
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "steps_per_generation": self.generation_steps,
            "num_generations": self.num_generations,
            "num_iterations": self.num_iterations,
            "max_steps": self.max_steps,
            "logging_steps": self.logging_steps,
            "max_completion_length": self.max_completion_length,
        }
        bad = [f"{k}={v}" for k, v in sizes.items() if v <= 0]
        if bad:
            raise HarnessConfigError("sizes must be positive: " + ", ".join(bad))
        if self.num_generations < 2:
            raise HarnessConfigError(f"num_generations={self.num_generations}: a group needs at least 2")
        if self.generation_batch % self.num_generations:
            raise HarnessConfigError(
                f"generation batch per_device_train_batch_size*steps_per_generation = "
                f"{self.per_device_train_batch_size}*{self.generation_steps} = {self.generation_batch} "
                f"is not divisible by num_generations={self.num_generations}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise HarnessConfigError(f"loss_type={self.loss_type!r}: expected one of {', '.join(LOSS_TYPES)}")
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise HarnessConfigError(f"importance_sampling_level={self.importance_sampling_level!r}: expected one of "
                                     f"{', '.join(IMPORTANCE_SAMPLING_LEVELS)}")  # fmt: skip
        if self.scale_rewards not in SCALE_REWARDS:
            raise HarnessConfigError(
                f"scale_rewards={self.scale_rewards!r}: expected one of {', '.join(SCALE_REWARDS)}"
            )
        if self.multi_objective_aggregation not in MULTI_OBJECTIVE_AGGREGATIONS:
            raise HarnessConfigError(f"multi_objective_aggregation={self.multi_objective_aggregation!r}: expected one "
                                     f"of {', '.join(MULTI_OBJECTIVE_AGGREGATIONS)}")  # fmt: skip
        if self.reward_weights is not None and len(self.reward_weights) not in (1, 2):
            raise HarnessConfigError(
                f"reward_weights={self.reward_weights}: the toy world has one or two reward functions"
            )
        if self.reward_model and len(self.reward_weights or ()) != 2:
            raise HarnessConfigError(f"reward_model needs two reward_weights (a function's, the model's), got "
                                     f"{self.reward_weights}")  # fmt: skip
        if self.reward_order not in REWARD_ORDERS:
            raise HarnessConfigError(f"reward_order={self.reward_order!r}: expected one of {', '.join(REWARD_ORDERS)}")
        if self.reward_order != "as_listed" and (self.reward_model or len(self.reward_weights or ()) != 2):
            raise HarnessConfigError(f"reward_order={self.reward_order!r} needs the two toy reward functions (two "
                                     f"reward_weights, no reward_model), got reward_weights={self.reward_weights}"
                                     f"{' and reward_model' if self.reward_model else ''}")  # fmt: skip
        if not 0 <= self.prompt_pads < self.prompt_length:
            raise HarnessConfigError(f"prompt_pads={self.prompt_pads}: must be at least 0 and below prompt_length")
        if self.temperature <= 0:
            raise HarnessConfigError(f"temperature={self.temperature}: must be positive")
        if not 0 <= self.dropout < 1:
            raise HarnessConfigError(f"dropout={self.dropout}: must be in [0, 1)")
        if self.beta < 0 or self.learning_rate < 0:
            raise HarnessConfigError(f"beta={self.beta}, learning_rate={self.learning_rate}: must be >= 0")
        if not 0 <= self.epsilon_low < 1 or self.epsilon_high < 0:
            raise HarnessConfigError(
                f"epsilon_low={self.epsilon_low}, epsilon_high={self.epsilon_high}: need 0 <= low < 1 and high >= 0"
            )
        soft = ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos", "vespo_lambda_neg")
        positive = [f"{name}={getattr(self, name)}" for name in soft if getattr(self, name) <= 0]
        if positive:
            raise HarnessConfigError(f"{', '.join(positive)}: must be positive")
        if not 0 <= self.top_entropy_quantile <= 1:
            raise HarnessConfigError(f"top_entropy_quantile={self.top_entropy_quantile}: must be in [0, 1]")
        if self.off_policy_mask_threshold is not None and not 0 < self.off_policy_mask_threshold < float("inf"):
            raise HarnessConfigError(f"off_policy_mask_threshold={self.off_policy_mask_threshold}: must be positive")
        if not 0 <= self.entropy_coef < float("inf"):
            raise HarnessConfigError(f"entropy_coef={self.entropy_coef}: must be finite and >= 0")
        adaptive = (self.entropy_coef_min, self.entropy_coef_max, self.entropy_coef_delta, self.entropy_target)
        if not (all(math.isfinite(v) for v in adaptive) and 0 <= adaptive[0] <= adaptive[1] and adaptive[2] >= 0):
            raise HarnessConfigError(f"entropy_coef_min, entropy_coef_max, entropy_coef_delta, entropy_target="
                                     f"{adaptive}: need finite values, 0 <= min <= max and delta >= 0")  # fmt: skip
        if self.lr_scheduler_type not in LR_SCHEDULER_TYPES or self.warmup_steps < 0 or self.weight_decay < 0:
            raise HarnessConfigError(f"lr_scheduler_type={self.lr_scheduler_type!r}, warmup_steps={self.warmup_steps}, "
                                     f"weight_decay={self.weight_decay}: expected one of "
                                     f"{', '.join(LR_SCHEDULER_TYPES)}, steps and decay >= 0")  # fmt: skip
        adam = (self.adam_beta1, self.adam_beta2, self.adam_epsilon)
        if any(v is not None for v in adam) and not (
            None not in adam and 0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1 and self.adam_epsilon > 0
        ):
            raise HarnessConfigError(f"adam_beta1={self.adam_beta1}, adam_beta2={self.adam_beta2}, "
                                     f"adam_epsilon={self.adam_epsilon}: set all three or none, betas in [0, 1), "
                                     "eps > 0")  # fmt: skip
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise HarnessConfigError(f"max_grad_norm={self.max_grad_norm}: must be positive (or none)")


def parse_settings(assignments: list[str]) -> dict[str, Any]:
    """`["loss_type=bnpo", "beta=0.04"]` -> {"loss_type": "bnpo", ...}; HarnessConfigError listing the keys."""
    return settings.parse_settings(assignments, GRPOSpec, SETTINGS, REFUSED)
