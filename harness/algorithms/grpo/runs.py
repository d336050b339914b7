"""The GRPO gate's runs: the specs its scenarios read, and how the run-wide settings reach them (PPO's runs.py has
the same role).

The specs are plain `GRPOSpec`s, so any GRPO target runs them; a scenario takes one of these and
`spec_for` puts the run-wide settings (seed, device, dtype, `--set`) on it.
"""

from __future__ import annotations

from .spec import CLIPPED_LOSS_TYPES, SETTINGS, GRPOSpec

# Two generations of 16 completions (four groups), each trained in two windows of two micro-batches of 4, logged
# once per generation (the spec's default KL weight logs `kl`); completions end at the stop token (uneven lengths).
UNEVEN = GRPOSpec(name="uneven_lengths", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                  steps_per_generation=4, max_steps=4, logging_steps=2)  # fmt: skip
# TRL issue 7047: 3 micro-batches per window, 4 per generation, so each generation's last window holds one.
SHORT = UNEVEN.with_(name="short_window", per_device_train_batch_size=2, gradient_accumulation_steps=3,
                     steps_per_generation=4, max_steps=2, logging_steps=2)  # fmt: skip
# Two passes over a generation of 16 completions (four groups, so some advantages are non-zero at every seed)
# at a learning rate that moves the ratios past the clip range: high_max 0.33-0.67 at seeds 0-9, where the mean
# of the micro-batch maxima is 0.05-0.20.
EXTREME = UNEVEN.with_(name="extremes", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                       steps_per_generation=4, num_iterations=2, max_steps=4, logging_steps=4,
                       learning_rate=0.05)  # fmt: skip
FRESH = UNEVEN.with_(name="freshness", logging_steps=1, max_steps=3)
# Completions that start with pad: empty rows, and micro-batches of one row that are all masked (1 to 5 of the 8
# at seeds 0-9 with this bias; 2.5 left seed 2 without one).
ALL_MASKED = UNEVEN.with_(name="all_masked", per_device_train_batch_size=1, gradient_accumulation_steps=4,
                          steps_per_generation=8, max_steps=2, logging_steps=2, pad_logit_bias=3.5)  # fmt: skip
# Logged after every micro-batch of one row at the all_masked pad bias: some intervals hold no completion token at
# all (TRL masks only the truncated completions, so its empty intervals are those; 3 of 8 at seed 0).
EMPTY = ALL_MASKED.with_(name="empty_interval", gradient_accumulation_steps=1, max_steps=8, logging_steps=1)
# Without a KL term (beta 0), logged after every micro-batch: `kl` must not be logged; one micro-batch per interval,
# so that a trainer that pools the token means per micro-batch (TRL) is judged on the KL's absence alone.
NO_KL = UNEVEN.with_(name="no_kl", gradient_accumulation_steps=1, steps_per_generation=4, max_steps=4,
                     logging_steps=1, beta=0.0)  # fmt: skip
# Three generations of 12 completions, each trained in two windows of 3 micro-batches, logged every 2 steps, under a
# linear schedule with a warm-up of 2 and weight decay 0.1 (lr_schedule): rates 0, 1/2, 1, 3/4, 1/2, 1/4 of the base.
# Windows of 3, so that a schedule advanced per backward pass (0, 3/4, 0, ...) is not one advanced per process on two
# ranks (0, 1, 1/2, 0, ...). AdamW's betas and eps off every trainer's defaults (TRL's 0.9, 0.999, 1e-8; the
# reference's eps 1e-5), so that an optimizer built without them shows.
LR_SCHEDULE = UNEVEN.with_(name="lr_schedule", per_device_train_batch_size=2, gradient_accumulation_steps=3,
                           steps_per_generation=6, max_steps=6, logging_steps=2, lr_scheduler_type="linear",
                           warmup_steps=2, weight_decay=0.1, adam_beta1=0.8, adam_beta2=0.99,
                           adam_epsilon=1e-6)  # fmt: skip
LR0 = UNEVEN.with_(name="partition", learning_rate=0.0, per_device_train_batch_size=4,
                   gradient_accumulation_steps=2, steps_per_generation=2)  # fmt: skip
# The uneven run at a temperature other than 1, so that log-probs and entropies of unscaled logits would show.
LOGITS = UNEVEN.with_(name="logit_recompute", temperature=0.7, max_steps=2, logging_steps=2)
CUTS = ((4, 2, 2, 1), (2, 4, 4, 1), (8, 1, 1, 1), (1, 8, 8, 1), (4, 1, 2, 1), (2, 3, 4, 1), (4, 2, 2, 2))
"""(per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation, num_iterations): cuts of one
generation batch of 8 completions, the first the reference. Windows of 2, 4, 1, 8, 1+1, 3+1 and 2+2."""
GRADIENT_CUTS = ((4, 2), (2, 4), (8, 1), (1, 8))
"""(per_device_train_batch_size, steps_per_generation = gradient_accumulation_steps): one window per generation."""
SOFT = ("cispo", "sapo", "vespo")
"""The loss types without a hard clip: their objectives bend with r away from 1, which LR 1e-3 barely shows."""
CISPO_CAP = 1.0
"""cispo's epsilon_high in its off-policy run when the run keeps the default 0.2: with ratios spread around 1 some
weights are capped and some not (at 0.2 every one is, and a weight that carries a gradient would not show)."""
OFF_DEFAULT_SETTINGS = {
    "sapo": {"sapo_temperature_pos": 2.0, "sapo_temperature_neg": 0.5},
    "vespo": {"vespo_k_pos": 3.0, "vespo_lambda_pos": 2.0, "vespo_k_neg": 2.0, "vespo_lambda_neg": 3.0},
}
"""sapo's and vespo's settings in their off-policy run, where the run keeps TRL's defaults (1.0 and 1.05; 2, 3, 3
and 2): each off its default, and the positive side's not the negative side's, so that a loss that hard-codes the
defaults or swaps the two sides weighs the run's tokens otherwise (on policy neither shows: sapo's gate is 1/2 and
vespo's phi 1 at a ratio of 1, whatever the settings)."""
NO_GRADIENT = "no gradient was compared"
"""What a gradient check fails with when it compared no gradient at all."""

REWARDS = UNEVEN.with_(name="advantages", reward_weights=(1.0, -0.5))
"""Two generations of 16 completions (four groups), each trained in two windows and logged once."""
SMALL_GROUPS = REWARDS.with_(name="reward_small_groups", per_device_train_batch_size=4, gradient_accumulation_steps=1,
                             steps_per_generation=1, max_steps=8, logging_steps=1)  # fmt: skip
"""Eight generations of one group (4 completions), each trained in one step and logged: a reward function scores
fewer than two completions of some interval, so its statistics there are over too few scores (section 8)."""
ON_THE_FLY = SMALL_GROUPS
"""The run of `logp_gradient[run=on_the_fly]`: each generation trained in one optimizer step of one pass (TRL's
defaults, steps_per_generation = gradient_accumulation_steps and num_iterations 1), where TRL's GRPOTrainer and the
reference store no old log-probs and take the current ones, detached; every other run of that check stores them. The
reward checks run it already (reward_stats[run=small_groups]), so it costs nothing more."""
MODEL = REWARDS.with_(name="reward_model", reward_weights=(1.0, 0.5), reward_model=True)
"""The same run with the toy world's reward model as the second reward function, handed over as a module."""


def spec_for(base: GRPOSpec, run: GRPOSpec) -> GRPOSpec:
    """`base` with the run-wide settings of `run`: seed, device, dtype, and every trainer setting of SETTINGS."""
    return base.with_(seed=run.seed, device=run.device, dtype=run.dtype, **{k: getattr(run, k) for k in SETTINGS})


def per_generation(spec: GRPOSpec) -> GRPOSpec:
    """`spec` logged once per generation (`logging_cadence` 'generation', definitions.py): logging_steps a
    generation's optimizer steps, its windows over num_iterations passes. Only the judge reads it: the trainer runs
    `spec` as configured, so a run is never repeated for its cadence."""
    return spec.with_(logging_steps=len(spec.window_sizes))


def clipping(run: GRPOSpec) -> GRPOSpec:
    """The extremes geometry under the run's loss type if it clips, else under the default one: the clip
    extremes exist only for the loss types with a hard clip (`--set loss_type=sapo` runs them as dapo)."""
    spec = spec_for(EXTREME, run)
    return spec if spec.loss_type in CLIPPED_LOSS_TYPES else spec.with_(loss_type=GRPOSpec().loss_type)


ASYMMETRIC_CLIP = (0.05, 0.6)
"""(epsilon_low, epsilon_high) of the asymmetric clip run when the run's bounds are equal: a wide clip-higher range.
DAPO's (TRL's 0.2 and 0.28) is too close: 1 or 2 tokens of the reference's run at seeds 0-4 tell its bounds apart;
with these, 14 to 44 of the reference's and 4 to 24 of examples/external_grpo's (0.1 and 0.4 left the latter none
at seed 2)."""


def asymmetric_clip_spec(run: GRPOSpec) -> GRPOSpec:
    """The extremes geometry with a clip range whose two sides differ (the run's own bounds where they already do),
    so that a trainer that swaps them, or takes one for both, clips other tokens."""
    spec = clipping(run).with_(name="clip_asymmetric")
    if spec.epsilon_low == spec.epsilon_high:
        spec = spec.with_(epsilon_low=ASYMMETRIC_CLIP[0], epsilon_high=ASYMMETRIC_CLIP[1])
    return spec


SEQUENCE_CISPO_CAP = 0.5
"""cispo's epsilon_high in its sequence-level run when the run keeps the default 0.2. Its sequence ratios lie mostly
below 1 (the first window's are exactly 1): of the reference's completions with a token and a non-zero advantage at
seeds 0-4, 7 to 16 are above 0.5 (capped) and 9 to 18 not, 3 to 6 of the capped ones flagged (A > 0); at the
off_policy run's cap 1, 0 to 2 are capped (none at seeds 1 and 3)."""


def sequence_level_spec(run: GRPOSpec, loss_type: str = "grpo") -> GRPOSpec:
    """The extremes geometry (two passes at LR 0.05) at importance_sampling_level 'sequence'. Under grpo, GSPO's
    setup (TRL advises grpo with it): one ratio per completion, so some completions are clipped whole (9 to 16 of
    the 32 trained rows of the reference's run at seeds 0-4, with some left unclipped in every interval). Under
    cispo (its cap at SEQUENCE_CISPO_CAP where the run keeps the default), sapo or vespo: the off_policy run at
    sequence level, vespo's with a bias-corrected KL (beta 0.04 where the run's is 0), the one term its sequence
    ratio reaches."""
    if loss_type == "grpo":
        return clipping(run).with_(name="sequence_level", importance_sampling_level="sequence", loss_type="grpo")
    spec = spec_for(EXTREME, run).with_(name="sequence_level", loss_type=loss_type,
                                        importance_sampling_level="sequence")  # fmt: skip
    if loss_type == "cispo" and run.epsilon_high == GRPOSpec().epsilon_high:
        spec = spec.with_(epsilon_high=SEQUENCE_CISPO_CAP)
    if loss_type == "vespo":
        spec = spec.with_(beta=run.beta or GRPOSpec().beta, use_bias_correction_kl=True)
    return spec


DELTA = 1.3
"""delta of the `run=delta` case: above 1 + epsilon_high (TRL's advice), below many ratios of the extremes run, so
tokens of negative advantage are capped (6 to 24 of the reference's at seeds 0-4, 2 to 12 of TRL 1.12.0's at seeds
0-2; at 1.5, 4 of the reference's at seed 0). Beta 0: TRL corrects the KL by the ratio before the cap, the contract
by the capped one (grpo-metrics.md section 7), an open question this case keeps out of."""
SEQUENCE_DELTA = 0.95
"""delta of the case at sequence level. A completion's ratio (the exp of its mean log-ratio) in the extremes run at
sequence level stays at or below 1 at seeds 1 and 3 (the first pass lowers every completion's), so a cap above 1
(1.3, 1.21) caps none there; at 0.95 it caps every first-pass completion of positive advantage (ratio exactly 1) and
the later ones above it. TRL's GRPOConfig and the reference's take any positive delta."""

TOP_ENTROPY_QUANTILE = 0.2
"""top_entropy_quantile of the entropy mask's run: the paper's recommendation (TRL's docs cite it), so each
micro-batch's tokens below its 0.8 quantile of entropy lose their policy term, most of them; a threshold taken at the
0.2 quantile (q for 1 - q) keeps most instead."""


def short_completions_spec(run: GRPOSpec) -> GRPOSpec:
    """The uneven lengths under dr_grpo with completions of up to SHORT_COMPLETIONS_LIMIT tokens and the stop token's
    logit raised by SHORT_COMPLETIONS_STOP_BIAS, so that every completion of some generation ends before the limit:
    dr_grpo still divides by the limit, a trainer that pads a generation to its longest completion and divides by
    that width does not."""
    return spec_for(UNEVEN, run).with_(name="short_completions", loss_type="dr_grpo",
                                       max_completion_length=SHORT_COMPLETIONS_LIMIT,
                                       stop_logit_bias=SHORT_COMPLETIONS_STOP_BIAS)  # fmt: skip


SHORT_COMPLETIONS_LIMIT = 24
"""max_completion_length of `short_completions_spec`, twice the gate's 12."""
SHORT_COMPLETIONS_STOP_BIAS = 5.0
"""The stop token's logit bias of `short_completions_spec` (every target's; the trl-grpo target's own 2.0 replaced).
The toy policies' logits are far from uniform at some seeds (seed 1's favour a few tokens), so the bias is measured,
not computed: at 5.0 the longest completion of a generation is 2 to 5 tokens on the reference at seeds 0-4 and 2 to
10 on TRL 1.16.0, well short of 24; at 4.0 up to 23 and 20; at 2.0 every generation of two of the reference's
seeds had a completion that reached 24."""


def across_generations_spec(run: GRPOSpec) -> GRPOSpec:
    """dapo in windows of 3 micro-batches of 4 over generations of 2 (two groups each), each window running on into
    the next generation: generation 0's two and generation 1's first, then generation 1's second and generation 2's
    two. dapo divides each token by its own generation's tokens times the window's share 3/2, every generation
    trained in full so that the records count its tokens; a trainer that takes one count for the whole window (its
    first micro-batch's generation's) is wrong at the window's other generation."""
    return spec_for(UNEVEN, run).with_(name="across_generations", loss_type="dapo", per_device_train_batch_size=4,
                                       gradient_accumulation_steps=3, steps_per_generation=2, max_steps=2,
                                       logging_steps=2, windows_across_generations=True)  # fmt: skip


def top_entropy_spec(run: GRPOSpec) -> GRPOSpec:
    """The extremes geometry (two passes at LR 0.05, tokens clipped, the KL on) with top_entropy_quantile
    TOP_ENTROPY_QUANTILE: the policy term only at each micro-batch's high-entropy tokens, the KL term at every
    token."""
    return clipping(run).with_(name="top_entropy", top_entropy_quantile=TOP_ENTROPY_QUANTILE)


def off_policy_mask_spec(run: GRPOSpec) -> GRPOSpec:
    """The extremes geometry (two passes at LR 0.05: the policy far from the one that drew the completions by the
    second) with off_policy_mask_threshold OFF_POLICY_MASK_THRESHOLD: completions of negative advantage whose KL
    estimate exceeds it lose their policy term, the KL term kept."""
    return clipping(run).with_(name="off_policy_mask", off_policy_mask_threshold=OFF_POLICY_MASK_THRESHOLD)


OFF_POLICY_MASK_THRESHOLD = 2.0
"""off_policy_mask_threshold of `off_policy_mask_spec`. The toy policies drift far at LR 0.05 (completions' KL
estimates of 0.6 to 5 by the second pass), so the threshold sits among them, not at TRL's suggested 0.5: measured
with it, completions of negative advantage dropped / kept at a KL estimate above 0 were 3-7 / 6-14 on the reference
and 3-9 / 2-6 on TRL 1.12.0 and 1.16.0 at seeds 0-4 in float32, and 1-5 / 1-12 (reference) and 4-8 / 2-6 (TRL
1.12.0) in bfloat16; at 1.5 and 1.75 some seed kept none in bfloat16 or kept one in float32."""


def at_cap_spec(run: GRPOSpec) -> GRPOSpec:
    """cispo on policy with its cap at 1: one window per generation, so the old log-probs are the new ones and
    every ratio is exactly 1, the cap itself, where r > epsilon_high is false (off_policy[loss_type=cispo])."""
    return spec_for(UNEVEN, run).with_(name="cispo_at_cap", loss_type="cispo", epsilon_high=CISPO_CAP,
                                       steps_per_generation=UNEVEN.gradient_accumulation_steps)  # fmt: skip


def off_policy_spec(run: GRPOSpec, loss_type: str) -> GRPOSpec:
    """The extremes geometry (two passes at LR 0.05: ratios far from 1) under a loss type without a clip: cispo's cap
    at CISPO_CAP, sapo's and vespo's settings at OFF_DEFAULT_SETTINGS, each where the run keeps its default."""
    spec = spec_for(EXTREME, run).with_(name="off_policy", loss_type=loss_type)
    if loss_type == "cispo" and run.epsilon_high == GRPOSpec().epsilon_high:
        spec = spec.with_(epsilon_high=CISPO_CAP)
    default = GRPOSpec()
    kept = {k: v for k, v in OFF_DEFAULT_SETTINGS.get(loss_type, {}).items() if getattr(run, k) == getattr(default, k)}
    return spec.with_(**kept)
