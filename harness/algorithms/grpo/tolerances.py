"""GRPO's rows of the tolerance table (harness/tolerances.py says how a row is read and what the numbers mean).

metric -> ((abs, rel[, scale]) for float64, float32, bfloat16). Each number says where it comes from.

The reward statistics (`reward_stats`) keep the default rows: measured gaps, seeds 0-4, reference at most
4.4e-16 (float64 sums of float32-exact scores), TRL 1.3e-7 absolute (float32 nanmean / nanstd).
So do the length statistics (`completion_lengths`: counts, a share, means of whole numbers): measured gaps,
seeds 0-9, reference 0 (float64 of integer lengths; float32, float64 and bfloat16 runs alike), TRL 1.12.0
at most 2.2e-7 absolute, 5e-8 relative (`float().mean()` of 13-16 lengths); min, max and the clipped ratio
exact. A length off by one token moves a mean by 1/16 or more.
"""

from __future__ import annotations

from harness.tolerances import ToleranceTable

ROWS: dict[str, tuple[tuple[float, ...], ...]] = {
    # GRPO clip metrics (docs/grpo-metrics.md): a flag mean or extreme; its scale is the share of flags whose ratio
    # lies within the dtype's rounding margin of a clip bound (CLIP_MARGIN, harness/tolerances.py), so
    # scale_tol 1 lets exactly those flip. Measured on the reference GRPO trainer, every GRPO check, seeds 0-4: no
    # uncertain flag at float32 and float64 (worst gaps 1e-8, the float32 rounding of the logged means: under 10%
    # of the abs/rel allowance); at bfloat16 uncertain shares up to 0.061 of the tokens (means) and 0.29 of a
    # completion (extremes), flips using up to 47% (means) and 98.5% (high_max) of the allowance. A flag can only
    # flip where it is uncertain, so the bound holds whatever the seed.
    **{
        name: ((1e-9, 5e-7, 1.0), (1e-5, 1e-5, 1.0), (1e-3, 1e-2, 1.0))
        for name in (
            "clip_ratio/low_mean",
            "clip_ratio/high_mean",
            "clip_ratio/region_mean",
            "clip_ratio/low_min",
            "clip_ratio/high_max",
        )
    },  # fmt: skip
    # not a logged metric: GRPO, the worst |advantage the loss saw - the oracle's float64 one from the recorded
    # scores| over every loss row (harness/algorithms/grpo/oracle/rewards.py, `advantages` scenario). Both trainers keep
    # advantages in float32 whatever the models' dtype (the reference rounds its float64 ones, TRL computes in
    # float32), so every dtype has the float32 row (the reference passes at float64 and bfloat16 too). Measured,
    # scale_rewards group/batch/none, |A| up to about 1.5: reference 8.6e-8 abs / 5.3e-8 rel (seeds 0-9), TRL
    # 1.12.0 3.1e-7 abs / 2.8e-7 rel (seeds 0-4); the row is ten times TRL's. A population std is off by 15%
    # (groups of 4), an epsilon subtracted instead of added by 2e-4 / std.
    "advantage": ((1e-6, 3e-6), (1e-6, 3e-6), (1e-6, 3e-6)),
    # not logged metrics: GRPO, the largest |a log-prob / entropy function's result - the float64 formula of what
    # it was given (logits, or a fused head's hidden states)| in a micro-batch (abs_tol only;
    # harness/instrument/logits.py).
    # Measured, uneven_lengths (temperature 1 and 0.7), extremes and all_masked, seeds 0-2, log-probs / entropies:
    # reference float32 7.2e-7 / 1.1e-6, float64 4.7e-7 / 7.2e-7 (its log_softmax runs in float32), bfloat16
    # 1.5e-2 / 5.9e-7; TRL 1.12.0 float32 7.9e-7 / 6.0e-7, bfloat16 2.2e-2 / 2.4e-2 (TRL does not build float64
    # runs). logit_recompute (temperature 0.7), seeds 0-2, float32: TRL 1.13.0 6.9e-7 / 4.4e-7 (the same two
    # functions), 1.14.2 4.8e-7 / 4.3e-7 (selective_log_softmax_and_entropy, against the formula of the logits it
    # was given over the temperature), 1.16.0 1.3e-6 / 1.9e-6 (its fused LM head, against the formula of the
    # head's logits recomputed from the hidden states, weight and bias it was given, over the temperature; on CPU
    # it scores every position, the prompt's too). About ten times the largest. An entropy of the logits before
    # the temperature (0.7) is off by O(0.1).
    "logit_gap/logps": ((1e-5, 0.0), (1e-5, 0.0), (2.5e-1, 0.0)),
    "logit_gap/entropies": ((1e-5, 0.0), (1e-5, 0.0), (2.5e-1, 0.0)),
    # not a logged metric: GRPO, the largest |dL/dlogp recorded - formula| / (|formula| + mean |formula| over the
    # masks) per token (scale 1; grpo/oracle/gradients.py). Measured on the reference GRPO trainer, every
    # logp_gradient case (uneven lengths for each loss type, windows 3+1, clipped runs with beta 0.04, 0 and the KL
    # uncorrected, windows of one completion), seeds 0-4: at most 4.5e-7 at float32, 6.9e-16 at float64, 1.4e-2 at
    # bfloat16; TRL 1.12.0 at float32, seeds 0-2, the nine cases it passes: 2.6e-7 (bnpo fails by 0.52: a mean of
    # micro-batch means). Rows: float32 about nine times that; float64 1e-6, the allowance of the table's other
    # float64 rows for a trainer that builds its loss in float32 even in a float64 run (about eight float32 ulps);
    # bfloat16 about ten times. Relative to each token's own size, because with the ratios of the clipped runs (up
    # to 58) one token's gradient is sixty times the mean: measured against the mean alone, its float32 rounding
    # was 2.1e-5 of it. A normaliser off by a factor f is off by about |f - 1| / 2 or more. The four loss types
    # added later (cispo, sapo, luspo, vespo; bnpo over each micro-batch's own tokens), their uneven_lengths and
    # off_policy cases, seeds 0-4: at most 9.3e-7 at float32 (cispo), 1.4e-15 at float64, 2.4e-2 at bfloat16
    # (cispo; the others 1.4e-2 or less): within the rows. sapo's tokens whose gate is saturated are not compared
    # (token_gradients.SATURATED; one such token reached 4.7e-6 at float32, seed 0).
    "gradient/logp_relative": ((0.0, 0.0, 1e-6), (0.0, 0.0, 4e-6), (0.0, 0.0, 1.5e-1)),
    # not a logged metric: GRPO, the largest |dL/dH recorded - formula| / (|formula| + mean |formula| over the masks)
    # per token (scale 1; grpo/oracle/entropy_bonus.py): -entropy_coef * world / window tokens, one number per window.
    # Measured, entropy_gradient, seeds 0-4: the reference GRPO trainer at most 2.3e-8 at float32 and bfloat16 (its
    # entropies float32), 0 at float64; TRL 1.12.0 and 1.16.0 reproduce their per-micro-batch form within 2.9e-8 at
    # float32, bfloat16 and float16 mixed precision (seeds 0-2). Rows: float32 ten times that; float64 1e-6, as
    # logp_relative's (a loss built in float32 in a float64 run); bfloat16 1e-2, about 2.5 ulps of entropies held in
    # bfloat16. A micro-batch's own mean in place of the window's is off by 0.30 to 1.03 in this run.
    "gradient/entropy_relative": ((0.0, 0.0, 1e-6), (0.0, 0.0, 3e-7), (0.0, 0.0, 1e-2)),
}

TOLERANCES = ToleranceTable.of("grpo", ROWS)
"""What GRPO's checks are judged by: the shared rows and these, never another algorithm's."""
