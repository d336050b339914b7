"""The GRPO contract's version and its history (harness/contract.py): what changed since version 1, and when.

Version 1 is the contract of release 0.1.0; each change below names the version that made it and the release that
shipped it, whose entry in CHANGELOG.md holds its migration note (version 13, release 0.13.0: TRL's off-policy
sequence mask and its adaptive entropy control).
Light at import (no torch): `python -m harness --version` reads it.
"""

from __future__ import annotations

from harness.contract import Change, Contract, optimizer_step_change

from .contract import NAMES

BNPO = Change(
    version=2,
    release="0.2.0",
    subject="bnpo",
    old="the window's token mean (its summed token losses over the window's tokens; policy_loss the interval's "
    "token mean)",
    new="the mean over the window's micro-batches of each one's token mean, as TRL documents it (\"the local "
    "batch\"; policy_loss likewise over the interval's micro-batches)",
    checks=("*loss_type=bnpo*",),
)
NEW_LOSS_TYPES = Change(
    version=2,
    release="0.2.0",
    subject="the loss types",
    old="grpo, bnpo, dr_grpo and dapo",
    new="also cispo, sapo, luspo and vespo (docs/grpo-metrics.md, section 4), each run by the checks that name it",
    checks=tuple(f"*loss_type={name}*" for name in ("cispo", "sapo", "luspo", "vespo")),
)
MODELS_AND_PROMPTS = Change(
    version=2,
    release="0.2.0",
    subject="what a GRPO target exposes",
    old="its logs and loss records",
    new="also its run's `models` (policy, and ref_policy when beta is not 0) and `prompts`, which the harness calls "
    "in float64 to recompute the log-probs, entropies and sampling",
    checks=("forward_recompute*", "sampling*"),
)
REWARD_MODEL = Change(
    version=2,
    release="0.2.0",
    subject="the reward model",
    old="no check of a reward model",
    new="with `reward_model` set, the target hands its trainer the toy world's reward model as its second reward "
    "function, watched with RewardTap.watch",
    checks=("reward_model*",),
)
REWARD_INPUTS = Change(
    version=2,
    release="0.2.0",
    subject="what a reward function was given",
    old="the scores alone",
    new="also each call's inputs, recorded by RewardTap.wrap(..., inputs=...), so that every score is checked to be "
    "of the completion it is assigned to",
    checks=("reward_inputs*",),
)

OPTIMIZER_STEP = optimizer_step_change(version=3, release="0.4.0")
ON_THE_FLY = Change(
    version=3,
    release="0.4.0",
    subject="the gradient without stored old log-probs",
    old="the gradient at the log-probs checked only in runs that store old log-probs",
    new="also in a run that stores none (one window per generation, one pass: TRL's defaults), where the loss "
    "takes the current log-probs, detached, as the old ones",
    checks=("logp_gradient[[]run=on_the_fly*",),
)
CLIP_BOUNDS = Change(
    version=3,
    release="0.4.0",
    subject="the gradient with unequal clip bounds",
    old="the gradient at the log-probs checked only with epsilon_low == epsilon_high",
    new="also with epsilon_low != epsilon_high (0.05 and 0.6), where a trainer that swaps the bounds or takes one for "
    "both is no longer exact",
    checks=("logp_gradient[[]run=clip_asymmetric*",),
)
SCHEDULE = Change(
    version=3,
    release="0.4.0",
    subject="the schedule and the counts",
    old="none: runs whose sizes divide evenly, no prompt used twice",
    new="a run with a partial last interval and a half-trained last generation: the counts of steps, generations and "
    "logs the configuration implies, every interval pooled, every prompt used once before any twice",
    checks=("schedule*",),
)
SEQUENCE_LEVEL = Change(
    version=4,
    release="0.5.0",
    subject="sequence-level importance sampling",
    old="every ratio per token (importance_sampling_level 'token' only)",
    new="also importance_sampling_level 'sequence' (GSPO) under grpo: one ratio per completion, its gradient and its "
    "clip flags, pooled over completions",
    checks=("logp_gradient[[]run=sequence_level]", "extremes[[]run=sequence_level]"),
)
MASK_TRUNCATED = Change(
    version=4,
    release="0.5.0",
    subject="truncated completions left out of the loss",
    old="a completion without the stop token could keep or drop its mask, the option never set by the gate",
    new="with mask_truncated_completions on, every completion that ran to the limit without the stop token has an "
    "empty mask in the loss, and the gradient follows",
    checks=("completion_mask[[]mask_truncated_completions=True*",),
)
CLIP_FLAGS = Change(
    version=4,
    release="0.5.0",
    subject="the clip statistics off the default epsilon",
    old="the pooled clip statistics checked only at epsilon 0.2, TRL's default",
    new="also at epsilon_low 0.05 and epsilon_high 0.6, where a trainer that flags its clipped tokens at the "
    "default's bounds is no longer exact",
    checks=("extremes[[]run=clip_asymmetric*",),
)

SEQUENCE_LOSS_TYPES = Change(
    version=5,
    release="0.6.0",
    subject="sequence-level importance sampling under cispo, sapo and vespo",
    old="importance_sampling_level 'sequence' run under grpo only",
    new="also under cispo (its weight the completion's ratio capped at epsilon_high, its clip flag one per "
    "completion in cispo_clip_ratio over completions), sapo (its gate of the completion's ratio) and vespo (its KL "
    "corrected by the completion's ratio; its own weight as at token level)",
    checks=("logp_gradient[[]run=sequence_level,loss_type=*", "extremes[[]run=sequence_level,loss_type=*"),
)

ENTROPY_MASK = Change(
    version=6,
    release="0.6.0",
    subject="the entropy mask of the policy loss",
    old="every token's policy term in the loss (top_entropy_quantile never set)",
    new="also top_entropy_quantile 0.2 (TRL's option): the policy term only at the tokens whose entropy is at or above "
    "the 0.8 quantile of their micro-batch's, every rank's; the KL term on every token",
    checks=("logp_gradient[[]run=top_entropy]",),
)

SEQUENCE_REGIMES = Change(
    version=7,
    release="0.7.0",
    subject="the sequence level's remaining regimes",
    old="delta's cap run at token level only; vespo's pooled weight and cispo's flag at the cap checked per token only",
    new="also delta's cap on each completion's ratio (delta 0.95), vespo/phi_seq_mean with the other pooled metrics "
    "at sequence level, and cispo on policy at its cap 1, where a completion whose ratio is the cap is not flagged",
    checks=("logp_gradient[[]run=delta,importance_sampling_level=sequence]",
            "extremes[[]run=sequence_level,loss_type=*"),
)
ENTROPY_MASK_REGIMES = Change(
    version=7,
    release="0.7.0",
    subject="the entropy mask in bfloat16 and on two ranks",
    old="the entropy mask run in float32 on one process",
    new="also with the entropies held in bfloat16, and in verify-dist on two ranks whose micro-batches hold unequal "
    "token counts: the threshold is the quantile of every rank's entropies together, no padding among them",
    checks=("logp_gradient[[]run=top_entropy,dtype=bfloat16]", "logp_gradient[[]ranks=*,run=top_entropy]"),
)
AGGREGATION = Change(
    version=7,
    release="0.7.0",
    subject="the reward functions normalised one by one",
    old="advantages of the weighted sum of the scores only (multi_objective_aggregation never set)",
    new="also multi_objective_aggregation 'normalize_then_sum' (TRL's GDPO option): each function's scores normalised "
    "in its group, their weighted sum normalised over the generation batch, its zero std the batch's",
    checks=("*multi_objective_aggregation=normalize_then_sum*",),
)
GROUP_SIZE = Change(
    version=7,
    release="0.7.0",
    subject="groups of another size",
    old="every run in groups of 4 completions (num_generations never varied)",
    new="also the reward run in groups of 8: its advantages and reward statistics over groups of num_generations",
    checks=("*num_generations=8*",),
)
ENTROPY_BONUS = Change(
    version=7,
    release="0.7.0",
    subject="the entropy bonus",
    old="no run with an entropy bonus (entropy_coef never set)",
    new="also entropy_coef 0.01 on the uneven lengths: dL/dH of each token -entropy_coef * world over the tokens of "
    "its optimizer step on every rank, whatever the micro-batch cut, and the log-probs' gradient still the policy's",
    checks=("entropy_gradient",),
)
CUTS_WITH_THE_WEIGHTS_MOVING = Change(
    version=8,
    release="0.8.0",
    subject="the micro-batch size with the weights moving",
    old="a generation batch's cuts compared at learning rate 0 only, where no token is clipped",
    new="also two passes at LR 0.05 in windows of 8 completions cut into micro-batches of 4, 2 and 8: the logged "
    "statistics the same, a clip fraction among them (not applicable under bnpo and in half precision)",
    checks=("partition[[]run=clipping]",),
)
WEIGHTS_NORMALISED_FIRST = Change(
    version=8,
    release="0.8.0",
    subject="the reward weights under normalize_then_sum",
    old="'normalize_then_sum' run only where the second function scores too few completions of a group to show its "
    "weight",
    new="also the reward model run under 'normalize_then_sum': both functions score every completion, so each weight "
    "meets a normalised score",
    checks=("reward_model[[]multi_objective_aggregation=normalize_then_sum]",),
)
SHORT_WINDOWS = Change(
    version=8,
    release="0.8.0",
    subject="short windows under every loss type",
    old="the gradient of windows 3+1 compared under the default loss type (dapo) only",
    new="also under grpo, bnpo, dr_grpo, cispo, sapo, luspo and vespo: each window's loss divided by its own "
    "completions, micro-batches or tokens, the short one's too",
    checks=("logp_gradient[[]run=short_window,loss_type=*]",),
)
LEFT_PADDED_PROMPTS = Change(
    version=8,
    release="0.8.0",
    subject="left-padded prompts",
    old="the forward recompute on prompts of one length (prompt_length real tokens)",
    new="also forward_recompute[prompt_pads=3]: prompts of 6 to 3 real tokens, left-padded, which a target builds "
    "from the spec's prompt_pads (or declares not applicable)",
    checks=("forward_recompute[[]prompt_pads=*]",),
)
REWARD_ORDER = Change(
    version=8,
    release="0.8.0",
    subject="reward functions in another order",
    old="the two reward functions always handed over in the order their names sort in",
    new="also advantages[reward_order=reversed] and reward_stats[reward_order=reversed]: the stop reward first, each "
    "function with its own weight (GRPOSpec.handed_weights), which a target hands over so or declares not applicable",
    checks=("advantages[[]reward_order=*]", "reward_stats[[]reward_order=*]"),
)
RANK_SAMPLING = Change(
    version=8,
    release="0.8.0",
    subject="each rank's own random stream",
    old="no check of what the ranks of verify-dist sampled",
    new="also verify-dist's sampling[ranks=2]: each rank's k-th completion against the other's k-th, position by "
    "position, agrees no more than the shifted pairings say independent draws do (Z at most 5)",
    checks=("sampling[[]ranks=*]",),
)
BONUS_UNDER_THE_MASK = Change(
    version=8,
    release="0.8.0",
    subject="the entropy bonus under the entropy mask",
    old="the entropy bonus run on every completion token (top_entropy_quantile 1)",
    new="also entropy_gradient[run=top_entropy]: the bonus on the tokens the entropy mask keeps, its window mean over "
    "them on every rank",
    checks=("entropy_gradient[[]run=top_entropy]",),
)
LR_SCHEDULE = Change(
    version=9,
    release="0.9.0",
    subject="the learning-rate schedule and the weight decay",
    old="every run at a constant learning rate without weight decay; each step recomputed from the rate and decay "
    "its optimizer held, taken on trust",
    new="also lr_schedule: a linear schedule with a warm-up of 2 over 6 steps and weight decay 0.1 (GRPOSpec's "
    "lr_scheduler_type, warmup_steps and weight_decay, which a target hands its trainer or declares not "
    "applicable): each step's rate and decay against the declared ones, each logged learning_rate against the "
    "schedule, each step recomputed under them; and verify-dist's lr_schedule[ranks=2], every rank's steps so",
    checks=("lr_schedule", "lr_schedule[[]ranks=*]"),
)
SHORT_COMPLETIONS = Change(
    version=9,
    release="0.9.0",
    subject="completions shorter than the maximum",
    old="dr_grpo's gradient run at max_completion_length 12, where some completion of nearly every generation runs to "
    "the limit",
    new="also logp_gradient[run=short_completions]: dr_grpo at max_completion_length 24 with the stop token's logit "
    "raised (GRPOSpec.stop_logit_bias 5.0), some generation's every completion shorter than the limit (the run must "
    "show one), where dr_grpo still divides by the limit",
    checks=("logp_gradient[[]run=short_completions]",),
)
ACROSS_GENERATIONS = Change(
    version=10,
    release="0.10.0",
    subject="windows that run across generations",
    old="every gradient run with windows that end with their generation, where a token-mean loss's count is the same "
    "for every micro-batch of a window",
    new="also logp_gradient[run=across_generations]: dapo in windows of 3 over generations of 2 micro-batches, each "
    "window running on into the next generation (GRPOSpec.windows_across_generations, which a target hands its "
    "trainer or declares not applicable; the run must show such a window), each micro-batch divided by its own "
    "generation's tokens",
    checks=("logp_gradient[[]run=across_generations]",),
)
BONUS_ACROSS_RANKS = Change(
    version=11,
    release="0.11.0",
    subject="the entropy bonus across ranks",
    old="the entropy bonus run on one process, where a window's tokens on this rank are its tokens on every rank",
    new="also verify-dist's entropy_gradient[ranks=2]: the bonus's window mean over every rank's tokens, the ranks' "
    "counts unequal, each rank's dL/dH -entropy_coef * world / (the window's tokens on every rank)",
    checks=("entropy_gradient[[]ranks=*]",),
)
OPTIMIZER_SETTINGS = Change(
    version=12,
    release="0.12.0",
    subject="the optimizer's betas and eps",
    old="every run at the trainer's own betas and eps, each step recomputed from those its optimizer held, taken on "
    "trust",
    new="also in lr_schedule: AdamW's betas 0.8 and 0.99 and eps 1e-6 (GRPOSpec's adam_beta1, adam_beta2 and "
    "adam_epsilon, which a target hands its trainer or declares not applicable): every param group's against the "
    "declared ones at every step (optimizer/settings), in verify-dist's lr_schedule[ranks=2] on every rank",
    checks=("lr_schedule", "lr_schedule[[]ranks=*]"),
)
SOFT_SETTINGS_OFF_DEFAULT = Change(
    version=12,
    release="0.12.0",
    subject="sapo's and vespo's settings",
    old="sapo and vespo run at TRL's defaults only (temperatures 1.0 and 1.05; k and lambda 2, 3 and 3, 2), where a "
    "loss that hard-codes them is exact",
    new="their off-policy runs (off_policy[loss_type=...] and logp_gradient[run=off_policy,loss_type=...]) set sapo's "
    "temperatures to 2.0 and 0.5 and vespo's k and lambda to 3, 2 (A >= 0) and 2, 3 (A < 0), where the run keeps the "
    "defaults: the pooled policy_loss and vespo's phi, and every token's gradient, under the configured settings",
    checks=("off_policy[[]loss_type=sapo]", "off_policy[[]loss_type=vespo]",
            "logp_gradient[[]run=off_policy,loss_type=sapo]", "logp_gradient[[]run=off_policy,loss_type=vespo]"),
)
OFF_POLICY_MASK = Change(
    version=13,
    release="0.13.0",
    subject="the off-policy sequence mask",
    old="every completion's policy term in the loss (off_policy_mask_threshold never set)",
    new="also off_policy_mask_threshold 2.0 (TRL's option, GRPOSpec's field, which a target hands its trainer or "
    "declares not applicable): in the extremes run, a completion of negative advantage whose mean old_logp - logp "
    "over its mask exceeds it loses its policy term, the KL term kept; the run must drop some and keep some above 0",
    checks=("logp_gradient[[]run=off_policy_mask]",),
)

ADAPTIVE_ENTROPY = Change(
    version=13,
    release="0.13.0",
    subject="the adaptive entropy control",
    old="the entropy bonus at a constant entropy_coef (use_adaptive_entropy never set)",
    new="also TRL's use_adaptive_entropy (GRPOSpec's fields, which a target hands its trainer or declares not "
    "applicable): entropy_gradient[run=adaptive] and [run=adaptive_gated], each window's coefficient the control's "
    "(none before the first step, then moved by the last window's mean entropy within its floor and ceiling, applied "
    "only at or below entropy_target), its target above every window's mean and below every one",
    checks=("entropy_gradient[[]run=adaptive]", "entropy_gradient[[]run=adaptive_gated]"),
)

CONTRACT = Contract(
    version=13,
    document="docs/grpo-metrics.md",
    changes=(BNPO, NEW_LOSS_TYPES, MODELS_AND_PROMPTS, REWARD_MODEL, REWARD_INPUTS, OPTIMIZER_STEP, ON_THE_FLY,
             CLIP_BOUNDS, SCHEDULE, SEQUENCE_LEVEL, MASK_TRUNCATED, CLIP_FLAGS, SEQUENCE_LOSS_TYPES, ENTROPY_MASK,
             SEQUENCE_REGIMES, ENTROPY_MASK_REGIMES, AGGREGATION, GROUP_SIZE, ENTROPY_BONUS,
             CUTS_WITH_THE_WEIGHTS_MOVING, WEIGHTS_NORMALISED_FIRST, SHORT_WINDOWS,
             LEFT_PADDED_PROMPTS, REWARD_ORDER, RANK_SAMPLING,
             BONUS_UNDER_THE_MASK, LR_SCHEDULE, SHORT_COMPLETIONS, ACROSS_GENERATIONS, BONUS_ACROSS_RANKS,
             OPTIMIZER_SETTINGS, SOFT_SETTINGS_OFF_DEFAULT, OFF_POLICY_MASK, ADAPTIVE_ENTROPY),
    metrics=NAMES,
)
"""GRPO's contract: the version a GRPO target may pin (`factory.contract_version`)."""
