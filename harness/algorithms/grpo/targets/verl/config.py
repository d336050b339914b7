"""The `verl` target's configuration: a GRPO run spec -> verl 0.9.1's own config dataclasses, or the reason the spec
is one verl's trainer cannot run.

Ours: the mapping. verl's: every class and field name (`verl.workers.config`). A spec's micro-batch
(`per_device_train_batch_size`) is verl's `ppo_micro_batch_size_per_gpu`; an optimizer step's completions
(`per_device_train_batch_size * gradient_accumulation_steps`) its mini-batch; a generation batch its training
step's batch; `num_iterations` its `ppo_epochs`; `beta` its `kl_loss_coef` with `use_kl_loss` and the k3 estimator
(`low_var_kl`), as verl's GRPO docs set them; each loss type is one of verl's policy losses under one of its
`loss_agg_mode`s (`LOSS_MODES`, docs/verl.md).
"""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessConfigError

LOSS_MODES = {
    "dapo": ("vanilla", "token-mean"),
    "grpo": ("vanilla", "seq-mean-token-mean"),
    "dr_grpo": ("vanilla", "seq-mean-token-sum-norm"),
    "cispo": ("cispo", "token-mean"),
    "sapo": ("sapo", "seq-mean-token-mean"),
}
"""The loss types verl has: (its policy loss `loss_mode`, its `loss_agg_mode`; core_algos's registered policy losses
and agg_loss). verl's cispo weighs by `clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high)`, TRL's by
`min(r, epsilon_high)`: the same with clip_ratio_low 1 and clip_ratio_high epsilon_high - 1 (`clip_ratios`). verl's
sapo is TRL's gate with tau_pos and tau_neg, always aggregated seq-mean-token-mean."""
SCALE_REWARDS = {"group": True, "none": False}
"""`scale_rewards` -> verl's `norm_adv_by_std_in_grpo`; verl has no batch-wide std."""


SEQUENCE_LEVEL = ("verl 0.9.1's sequence-level ratios are a policy loss of their own (core_algos, loss_mode 'gspo'), "
                  "which this target does not map yet")
TRUNCATED = "verl 0.9.1 has no option that leaves truncated completions out of the loss"
ENTROPY_MASK = ("verl 0.9.1 has no entropy mask of the policy loss: its policy losses and agg_loss (core_algos) keep "
                "every response token's term, and the entropy enters the loss only as a bonus (entropy_coeff)")


AGGREGATION = ("verl 0.9.1 normalises one reward per completion (a reward manager's compute_score; "
               "compute_grpo_outcome_advantage): it has no per-function normalisation (normalize_then_sum)")
PROMPTS = ("the target builds its toy world's prompts unpadded (it does not read prompt_pads): every prompt it hands "
           "verl has prompt_length real tokens")
SCHEDULE = ("the target builds verl's optimizer at a constant rate without warm-up or weight decay, at its "
            "default betas and eps (FSDPOptimizerConfig): it maps no learning-rate schedule (verl's are constant and "
            "cosine), decay or Adam settings")
REWARD_ORDER = ("the target weighs and sums its reward functions itself (_score) and hands verl one reward per "
                "completion: the order of the functions is the target's, not the trainer's to pair with weights")


ACROSS = "verl trains each training step's batch, one generation, in mini-batches of its own: no window holds two"

OFF_POLICY_MASK = ("verl 0.9.1 has no off-policy sequence mask of the old policy's KL: its policy losses keep every "
                   "response's term whatever its drift (its rollout correction, another quantity, is not run by this "
                   "target)")
ADAPTIVE_ENTROPY = "the target sets verl's entropy_coeff 0: it maps no entropy bonus, so no adaptive control of one"


def refusal(spec) -> str | None:
    """Why verl's trainer cannot run `spec` (None: it can)."""
    if getattr(spec, "windows_across_generations", False):
        return ACROSS
    if spec.loss_type not in LOSS_MODES:
        return f"verl 0.9.1 has no {spec.loss_type!r} loss (its policy losses and loss_agg_modes: config.LOSS_MODES)"
    if spec.scale_rewards not in SCALE_REWARDS:
        return f"verl's GRPO advantage divides by its group's std or by nothing, not by a {spec.scale_rewards!r} std"
    if spec.delta is not None:
        return "verl's vanilla policy loss has no upper bound delta on the ratio (its dual clip bounds negative ones)"
    if getattr(spec, "reward_model", False):
        return "verl scores with a reward model worker of its own, which this target does not build"
    if getattr(spec, "importance_sampling_level", "token") != "token":
        return SEQUENCE_LEVEL
    if getattr(spec, "mask_truncated_completions", False):
        return TRUNCATED
    if getattr(spec, "top_entropy_quantile", 1.0) < 1:
        return ENTROPY_MASK
    if getattr(spec, "off_policy_mask_threshold", None) is not None:
        return OFF_POLICY_MASK
    if getattr(spec, "use_adaptive_entropy", False):
        return ADAPTIVE_ENTROPY
    if getattr(spec, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        return AGGREGATION
    if (getattr(spec, "lr_scheduler_type", "constant") != "constant" or getattr(spec, "weight_decay", 0.0)
            or getattr(spec, "adam_beta1", None) is not None):  # fmt: skip
        return SCHEDULE
    if spec.generation_steps % spec.gradient_accumulation_steps:
        return (
            f"verl cuts a training step's {spec.generation_batch} completions into whole mini-batches of "
            f"{spec.per_device_train_batch_size * spec.gradient_accumulation_steps}: no short last window"
        )
    if spec.max_steps % steps_per_generation(spec):
        return (
            f"verl trains a generation to its end: {spec.max_steps} optimizer steps are not whole training steps "
            f"of {steps_per_generation(spec)}"
        )
    return None


def steps_per_generation(spec) -> int:
    """Optimizer steps (verl's mini-batches, over its epochs) of one training step."""
    return spec.generation_steps // spec.gradient_accumulation_steps * spec.num_iterations


def clip_ratios(spec) -> tuple[float, float]:
    """verl's clip_ratio_low and clip_ratio_high for `spec` (cispo's cap as verl's clamp bounds: LOSS_MODES)."""
    epsilon_low = getattr(spec, "epsilon_low", 0.2)
    epsilon_high = getattr(spec, "epsilon_high", epsilon_low)
    if spec.loss_type == "cispo":
        return 1.0, epsilon_high - 1.0
    return epsilon_low, epsilon_high


def checked(spec) -> None:
    """HarnessConfigError naming why verl cannot run `spec`."""
    why = refusal(spec)
    if why is not None:
        raise HarnessConfigError(f"verl target: {why}")


def actor_config(spec, model_path: str) -> Any:
    """verl's FSDPActorConfig for `spec` (its model config and engine inside), with its optimizer."""
    from verl.workers.config import FSDPActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.config.actor import PolicyLossConfig

    model = HFModelConfig(path=model_path, use_remove_padding=False, enable_gradient_checkpointing=False,
                          override_config={"attn_implementation": "eager"})  # fmt: skip
    precision = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    engine = FSDPEngineConfig(strategy="fsdp2", use_torch_compile=False, mixed_precision=precision,
                              use_dynamic_bsz=False, micro_batch_size_per_gpu=spec.per_device_train_batch_size,
                              infer_micro_batch_size_per_gpu=spec.per_device_train_batch_size)  # fmt: skip
    max_grad_norm = getattr(spec, "max_grad_norm", None)
    optim = FSDPOptimizerConfig(lr=spec.learning_rate, weight_decay=0.0, betas=(0.9, 0.999), lr_warmup_steps=0,
                                clip_grad=max_grad_norm if max_grad_norm is not None else 1e30,
                                total_training_steps=spec.max_steps)  # fmt: skip
    epsilon_low, epsilon_high = clip_ratios(spec)
    loss_mode, agg_mode = LOSS_MODES[spec.loss_type]
    config = FSDPActorConfig(
        strategy="fsdp2",
        rollout_n=spec.num_generations,
        ppo_mini_batch_size=spec.per_device_train_batch_size * spec.gradient_accumulation_steps,
        ppo_micro_batch_size_per_gpu=spec.per_device_train_batch_size,
        ppo_epochs=spec.num_iterations,
        clip_ratio=epsilon_low,
        clip_ratio_low=epsilon_low,
        clip_ratio_high=epsilon_high,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
        tau_pos=spec.sapo_temperature_pos,
        tau_neg=spec.sapo_temperature_neg,
        loss_agg_mode=agg_mode,
        loss_scale_factor=spec.max_completion_length if spec.loss_type == "dr_grpo" else None,
        use_kl_loss=spec.beta != 0,
        kl_loss_coef=spec.beta,
        kl_loss_type="low_var_kl",
        entropy_coeff=0.0,
        use_torch_compile=False,
        fsdp_config=engine,
        optim=optim,
    )
    config.model_config = model
    return config
