"""The `openrlhf` target's configuration: a GRPO run spec -> the arguments OpenRLHF 0.11.2's actor update reads, or
the reason the spec is one OpenRLHF's trainer cannot run.

Ours: the mapping. OpenRLHF's: every argument name (`openrlhf/cli/train_ppo_ray.py`, the dotted `--group.name`
options, read by `ActorPPOTrainer` and `DeepspeedStrategy` as `args.group.name`). A spec's micro-batch is
`--train.micro_batch_size`; an optimizer step's completions (micro-batch x gradient_accumulation_steps) are
`--train.batch_size` (DeepSpeed's accumulation steps are their quotient, `DeepspeedStrategy.accumulated_gradient`); a
generation batch is one training step's replay buffer; `num_iterations` is `--train.max_epochs`; `beta` is
`--algo.kl.init_coef` with `--algo.kl.use_loss` and `--algo.kl.estimator k3`, as OpenRLHF's GRPO scripts set them;
`epsilon_low` and `epsilon_high` are `--actor.eps_clip_low_high`; `dapo` and `grpo` are `--actor.loss_agg_mode`
`token-mean` and `seq-mean-token-mean` of the `ppo` policy loss; `scale_rewards` `group` and `none` are the
advantage estimators `group_norm` and `dr_grpo`. `--actor.entropy_coef 0` has the update compute and log the entropy
without a bonus. Outside OpenRLHF's command line: `ds.param_dtype` "fp32" (its choices are bf16 and fp16;
`get_train_ds_config` then enables neither, so DeepSpeed keeps the model's float32), ZeRO stage 0 (the torch
optimizer steps the parameters themselves), the constant learning-rate schedule without warmup.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

from harness.errors import HarnessConfigError

LOSS_AGG_MODES = {"dapo": "token-mean", "grpo": "seq-mean-token-mean"}
"""The loss types OpenRLHF has: its `--actor.loss_agg_mode` choices under the `ppo` policy loss (PolicyLoss,
aggregate_loss in openrlhf/models/loss.py)."""
ESTIMATORS = {"group": "group_norm", "none": "dr_grpo"}
"""`scale_rewards` -> OpenRLHF's `--algo.advantage.estimator` (RemoteExperienceMaker.compute_advantages_and_returns:
group_norm divides by the group's std + 1e-9, dr_grpo subtracts the group's mean only)."""

NO_LOSS = ("OpenRLHF 0.11.2 aggregates the ppo policy loss as token-mean or seq-mean-token-mean only "
           "(--actor.loss_agg_mode; aggregate_loss), with no {0} loss")  # fmt: skip
SEQUENCE_LEVEL = ("OpenRLHF 0.11.2's sequence-level ratio is its gspo policy loss (--actor.policy_loss_type gspo), "
                  "which this target does not map")
TRUNCATED = "OpenRLHF 0.11.2 has no option that leaves truncated completions out of the loss"
ENTROPY_MASK = ("OpenRLHF 0.11.2 has no entropy mask of the policy loss: PolicyLoss keeps every action token's term, "
                "the entropy enters the loss only as a bonus (--actor.entropy_coef)")
OFF_POLICY_MASK = ("OpenRLHF 0.11.2 has no off-policy sequence mask of the old policy's KL: PolicyLoss keeps every "
                   "sequence's term whatever its drift")
ADAPTIVE_ENTROPY = ("the target leaves OpenRLHF's --actor.entropy_coef unset: it maps no entropy bonus, so no "
                    "adaptive control of one")
DELTA = "OpenRLHF's ppo policy loss has no upper bound delta on the ratio (its --actor.dual_clip bounds negative ones)"
AGGREGATION = ("OpenRLHF 0.11.2's reward is one number per completion and its advantage normalises that sum "
               "(compute_advantages_and_returns): no option normalises each reward function's scores before summing")
REWARD_MODEL = "OpenRLHF scores with a reward-model actor group of its own, which this target does not build"
BATCH_STD = ("OpenRLHF's group advantage divides by its group's std (group_norm) or by nothing (dr_grpo); its "
             "batch-wide normalisation (reinforce_baseline) is a token-level whitening, not a batch std")
WHOLE_WINDOWS = ("OpenRLHF's ppo_train steps DeepSpeed's engine every accumulated_gradient micro-batches over the "
                 "whole replay buffer: a short last window would carry its gradient into the next epoch's first")
SCHEDULE = ("the target builds OpenRLHF's optimizer at a constant rate without warm-up or weight decay, at "
            "betas (0.9, 0.95) and eps 1e-8 (--actor.lr_scheduler constant, --actor.adam.weight_decay 0): it maps no "
            "schedule, decay or Adam settings")
TO_THE_END = "OpenRLHF trains every replay buffer to its end (ppo_train): a run cannot stop inside a training step"
ACROSS = "OpenRLHF trains each replay buffer, one generation, in windows of its own: no window holds two generations"


def refusal(spec) -> str | None:
    """Why OpenRLHF's trainer cannot run `spec` (None: it can): the first of its refusals, in order."""
    steps = steps_per_generation(spec)
    refusals = (
        (spec.loss_type not in LOSS_AGG_MODES, NO_LOSS.format(repr(spec.loss_type))),
        (spec.scale_rewards not in ESTIMATORS, BATCH_STD),
        (spec.delta is not None, DELTA),
        (getattr(spec, "reward_model", False), REWARD_MODEL),
        (getattr(spec, "importance_sampling_level", "token") != "token", SEQUENCE_LEVEL),
        (getattr(spec, "mask_truncated_completions", False), TRUNCATED),
        (getattr(spec, "top_entropy_quantile", 1.0) < 1, ENTROPY_MASK),
        (getattr(spec, "off_policy_mask_threshold", None) is not None, OFF_POLICY_MASK),
        (getattr(spec, "use_adaptive_entropy", False), ADAPTIVE_ENTROPY),
        (getattr(spec, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize", AGGREGATION),
        ((getattr(spec, "lr_scheduler_type", "constant") != "constant" or getattr(spec, "weight_decay", 0.0)
          or getattr(spec, "adam_beta1", None) is not None), SCHEDULE),
        (getattr(spec, "windows_across_generations", False), ACROSS),
        (spec.generation_steps % spec.gradient_accumulation_steps != 0,
         f"{WHOLE_WINDOWS} ({spec.generation_steps} micro-batches, windows of {spec.gradient_accumulation_steps})"),
        (steps == 0 or spec.max_steps % steps != 0,
         f"{TO_THE_END}: {spec.max_steps} optimizer steps are not whole training steps of {steps}"),
    )  # fmt: skip
    return next((why for refused, why in refusals if refused), None)


def checked(spec) -> None:
    """HarnessConfigError naming why OpenRLHF cannot run `spec`."""
    why = refusal(spec)
    if why is not None:
        raise HarnessConfigError(f"openrlhf target: {why}")


def steps_per_generation(spec) -> int:
    """Optimizer steps of one training step: the replay buffer's windows, over its epochs."""
    return spec.generation_steps // spec.gradient_accumulation_steps * spec.num_iterations


def arguments(spec) -> NS:
    """OpenRLHF's `args` for `spec` (the names its command line gives them; module docstring)."""
    max_norm = getattr(spec, "max_grad_norm", None)
    return NS(
        local_rank=-1,
        train=NS(micro_batch_size=spec.per_device_train_batch_size, max_epochs=spec.num_iterations,
                 batch_size=spec.per_device_train_batch_size * spec.gradient_accumulation_steps,
                 dynamic_batch_enable=False, colocate_all=False, async_enable=False, enable_ema=False),
        actor=NS(eps_clip_low_high=(spec.epsilon_low, spec.epsilon_high), dual_clip=None, policy_loss_type="ppo",
                 loss_agg_mode=LOSS_AGG_MODES[spec.loss_type], aux_loss_coef=0.0, entropy_coef=0.0, optim="adam",
                 adam=NS(lr=spec.learning_rate, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0),
                 lr_scheduler="constant", lr_warmup_ratio=0.0, min_lr_ratio=0.1,
                 max_norm=0.0 if max_norm is None else max_norm),
        algo=NS(kl=NS(use_loss=spec.beta != 0, init_coef=spec.beta, estimator="k3", unbiased_gradient=False),
                advantage=NS(estimator=ESTIMATORS[spec.scale_rewards], gamma=1.0, is_correction_level="off",
                             is_correction_mode="mask", is_correction_gating="ratio",
                             is_correction_threshold=(0.5, 5.0), no_std_norm=False)),
        rollout=NS(n_samples_per_prompt=spec.num_generations, temperature=spec.temperature),
        reward=NS(clip_range=(-10, 10)),
        ds=NS(zero_stage=0, param_dtype="fp32", packing_samples=False, tensor_parallel_size=1, ring_attn_size=1,
              adam_offload=False, zpg=1, use_universal_ckpt=False, grad_accum_dtype=None, overlap_comm=False,
              deepcompile=False),
        vllm=NS(sync_backend="gloo"),
        length_penalty=NS(),
    )  # fmt: skip
