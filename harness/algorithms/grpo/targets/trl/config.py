"""The `trl-grpo` target's config translation: a GRPO run spec -> the keyword arguments of TRL's `GRPOConfig`."""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessConfigError

from ...spec import ADAM, ADAPTIVE, SOFT_SETTINGS

SPEC_FIELDS = tuple(
    "per_device_train_batch_size gradient_accumulation_steps steps_per_generation num_generations num_iterations "
    "max_steps logging_steps learning_rate max_completion_length temperature loss_type beta seed device dtype".split()
)
"""The spec attributes a run cannot be built without; the others default as in reference_ppo's GRPOConfig."""
MIXED_PRECISION = {"bfloat16": "bf16", "float16": "fp16"}
"""A run in bfloat16 or float16 trains as TRL's users do: float32 weights under TRL's own mixed precision (the
`GRPOConfig` flag named here; `bf16=True` is its default), not weights cast to the low dtype."""


def weights_dtype(dtype: str) -> str:
    """The dtype the target builds its models in for a run in `dtype` (float32 under mixed precision)."""
    return "float32" if str(dtype) in MIXED_PRECISION else str(dtype)


def trl_args(spec, output_dir: str, extra: dict[str, Any]) -> dict[str, Any]:
    """TRL GRPOConfig keyword arguments for `spec` (HarnessConfigError naming a field the spec lacks)."""
    lacking = [name for name in SPEC_FIELDS if not hasattr(spec, name)]
    if lacking:
        raise HarnessConfigError(f"trl-grpo target: the run spec has no {', '.join(lacking)}")
    epsilon_low = getattr(spec, "epsilon_low", getattr(spec, "epsilon", 0.2))
    max_grad_norm = getattr(spec, "max_grad_norm", None)
    # in the order the functions are handed over (GRPOSpec.reward_order), each function's its own
    reward_weights = getattr(spec, "handed_weights", getattr(spec, "reward_weights", None))
    args = dict(
        output_dir=output_dir,
        per_device_train_batch_size=spec.per_device_train_batch_size,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        steps_per_generation=spec.steps_per_generation or spec.gradient_accumulation_steps,
        num_generations=spec.num_generations,
        num_iterations=spec.num_iterations,
        max_steps=spec.max_steps,
        logging_steps=spec.logging_steps,
        learning_rate=spec.learning_rate,
        # the spec's schedule and decay (constant and 0 when it has none); transformers' defaults are linear and 0
        lr_scheduler_type=getattr(spec, "lr_scheduler_type", "constant"),
        warmup_steps=getattr(spec, "warmup_steps", 0),
        optim="adamw_torch",
        weight_decay=getattr(spec, "weight_decay", 0.0),
        # AdamW's betas and eps where the spec declares them (None: transformers' defaults, 0.9, 0.999 and 1e-8)
        **{name: getattr(spec, name) for name in ADAM if getattr(spec, name, None) is not None},
        max_completion_length=spec.max_completion_length,
        temperature=spec.temperature,
        loss_type=spec.loss_type,
        beta=spec.beta,
        use_bias_correction_kl=getattr(spec, "use_bias_correction_kl", True),
        epsilon=epsilon_low,
        epsilon_high=getattr(spec, "epsilon_high", epsilon_low),
        delta=getattr(spec, "delta", None),
        importance_sampling_level=getattr(spec, "importance_sampling_level", "token"),
        top_entropy_quantile=getattr(spec, "top_entropy_quantile", 1.0),
        off_policy_mask_threshold=getattr(spec, "off_policy_mask_threshold", None),
        entropy_coef=getattr(spec, "entropy_coef", 0.0),
        # adaptive entropy control (TRL 1.12.0 and later have it) where the spec turns it on
        **{name: getattr(spec, name) for name in ADAPTIVE if getattr(spec, "use_adaptive_entropy", False)},
        # sapo's and vespo's settings (TRL 1.12.0 and later have them all), when the spec has them
        **{name: getattr(spec, name) for name in SOFT_SETTINGS if hasattr(spec, name)},
        scale_rewards=getattr(spec, "scale_rewards", "group"),
        multi_objective_aggregation=getattr(spec, "multi_objective_aggregation", "sum_then_normalize"),
        reward_weights=list(reward_weights) if reward_weights is not None else None,
        max_grad_norm=max_grad_norm if max_grad_norm is not None else 0.0,  # 0: no clipping
        seed=spec.seed,
        data_seed=spec.seed,
        model_init_kwargs={"dtype": weights_dtype(spec.dtype)},  # the reference model TRL rebuilds when beta != 0
        use_vllm=False,
        use_cpu=spec.device == "cpu",
        bf16=MIXED_PRECISION.get(str(spec.dtype)) == "bf16",
        fp16=MIXED_PRECISION.get(str(spec.dtype)) == "fp16",
        gradient_checkpointing=False,
        disable_dropout=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="steps",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
        push_to_hub=False,
        # The spec's pad bias asks for empty completions. TRL's mask keeps every token up to its EOS, a sampled
        # pad included, so the one way TRL empties a completion is masking it when truncated.
        mask_truncated_completions=bool(getattr(spec, "mask_truncated_completions", False)
                                        or getattr(spec, "pad_logit_bias", 0.0)),  # fmt: skip
    )
    args.update(extra)
    return args
