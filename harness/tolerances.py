"""One table of tolerances: per logged metric and per dtype, (abs_tol, rel_tol, scale_tol).

A logged value `x` is close to the oracle's `y` when both are finite and
`|x - y| <= abs_tol + rel_tol * |y| + scale_tol * scale`, where `scale` is the size of the
terms `y` is made of (mean |per-token value| for a pooled mean; see `Expectation.scale`).
The oracle recomputes in float64 from the trainer's own tensors, so the gap is only the
trainer's rounding in its working dtype and buffers; rounding a sum scales with its terms,
not with the sum, which can sit near 0 (a policy loss over whitened advantages). Each
number below says where it comes from; `nox -s tests` holds them to the precision suite
(tests/test_precision.py): correct float32-buffer trainers pass at float64, and a relative
error of 1e-3 in any of the eight pooled metrics fails at float32 and at float64.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from harness.errors import HarnessConfigError


class Tolerance(NamedTuple):
    """Allowed gap: `abs_tol + rel_tol * |expected| + scale_tol * scale`.

    `scale` is the size of the terms the expected value is made of (mean |per-token value|):
    a float rounding error of a mean scales with its terms, not with the mean.
    """

    abs_tol: float
    rel_tol: float
    scale_tol: float = 0.0

    def allowed(self, expected: float, scale: float | None = None) -> float:
        """The largest gap accepted around `expected` (made of terms of size `scale`)."""
        return self.abs_tol + self.rel_tol * abs(expected) + self.scale_tol * (scale or 0.0)


DTYPES = ("float64", "float32", "bfloat16")
DEFAULT = "*"
"""Row used for a metric that has no row of its own."""

# metric: ((abs, rel, scale) for float64, float32, bfloat16).
# scale_tol 1e-6 (float64 and float32): measured gap / scale on correct trainers, seeds 0-9, every
#   check: at most 9.2e-8 at float32 (reference trainer, loss/value_avg), 5.2e-8 at float64 (the
#   clip fractions and scores pass through float32 even there); ten times that, rounded up.
# float64: trainers (TRL, reference_ppo) pass statistics through float32 buffers and `.float()`
#   casts even in float64 runs, so logged values carry float32 rounding: rel 5e-7 (eight float32
#   ulps); abs 1e-9 for what has no scale (identities, one run's log against another's).
#   loss/policy_avg: abs 1e-7: at LR 0 the loss over whitened advantages is a float32-rounded sum of
#   O(1) terms near 0, compared split against split without a scale (measured gaps up to 1.8e-8).
# float32: abs and rel as measured on the reference trainer (worst 6e-8 relative) with margin for
#   GPU reduction orders; val/ratio_var rel 1e-5 (it was 1e-3, which let a 1e-3 error through).
#   Dropout needs no row of its own: with attention dropout 0.1 the reference (eval mode) logs the
#   LR-0 identities exactly (val/ratio 1, approxkl and clipfrac 0, seeds 0-2), and a trainer that lets
#   it act misses them by 0.13-0.69 in val/ratio and 0.24-0.39 in approxkl, far beyond any row.
# bfloat16: per-token values and their sums are rounded to 8 bits of mantissa. Worst gaps on the reference
#   trainer, every check, seeds 0-9, on the CPU (docs/bench.md has the table): loss/policy_avg 1.9e-3 abs
#   (47% of its allowance), loss/value_avg 3.0e-3 rel (24%), objective/entropy 2.9e-2 abs / 1.1e-3 rel (11%),
#   objective/kl 1.5e-3 rel (13%), val/ratio 4.0e-4 rel (6%), val/ratio_var 6.2e-3 rel (15%), policy/approxkl_avg
#   8.7e-4 rel (3%); the entropy and clip-fraction means 1e-7 or less (their rows are far looser than the CPU
#   needs: left so until measured on CUDA, where kernels round differently). TRL sums in bfloat16, hence the
#   margin. No scale term.
_F64 = (1e-9, 5e-7, 1e-6)
_S32 = 1e-6
_ROWS: dict[str, tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]] = {
    DEFAULT: (_F64, (1e-5, 1e-5, _S32), (5e-3, 2e-2)),
    "loss/policy_avg": ((1e-7, 5e-7, 1e-6), (1e-6, 1e-5, _S32), (4e-3, 1e-2)),
    "policy/clipfrac_avg": (_F64, (1e-6, 1e-5, _S32), (2e-3, 1e-2)),
    "loss/value_avg": (_F64, (1e-6, 1e-5, _S32), (2e-3, 1e-2)),
    "val/clipfrac_avg": (_F64, (1e-6, 1e-5, _S32), (2e-3, 1e-2)),
    "policy/approxkl_avg": (_F64, (1e-7, 1e-4, _S32), (5e-4, 2e-2)),
    "policy/entropy_avg": (_F64, (1e-5, 1e-5, _S32), (5e-3, 1e-2)),
    "val/ratio": (_F64, (1e-5, 1e-5, _S32), (2e-3, 5e-3)),
    "val/ratio_var": (_F64, (1e-9, 1e-5, _S32), (5e-4, 5e-2)),
    "objective/kl": (_F64, (1e-5, 1e-5, _S32), (1e-2, 1e-2)),
    "objective/entropy": (_F64, (1e-5, 1e-5, _S32), (1e-2, 1e-2)),
    "objective/non_score_reward": (_F64, (1e-6, 1e-5, _S32), (1e-3, 2e-2)),
    "objective/scores": (_F64, (1e-5, 1e-5, _S32), (1e-2, 1e-2)),
    "objective/rlhf_reward": (_F64, (1e-5, 1e-5, _S32), (1e-2, 1e-2)),
    # GRPO clip metrics (docs/grpo-metrics.md): a flag mean or extreme; its scale is the share of flags whose ratio
    # lies within the dtype's rounding margin of a clip bound (harness/algorithms/grpo/expect.py, CLIP_MARGIN), so
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
    # scores| over every loss row (harness/algorithms/grpo/rewards.py, `advantages` scenario). Both trainers keep
    # advantages in float32 whatever the models' dtype (the reference rounds its float64 ones, TRL computes in
    # float32), so every dtype has the float32 row (the reference passes at float64 and bfloat16 too). Measured,
    # scale_rewards group/batch/none, |A| up to about 1.5: reference 8.6e-8 abs / 5.3e-8 rel (seeds 0-9), TRL
    # 1.12.0 3.1e-7 abs / 2.8e-7 rel (seeds 0-4); the row is ten times TRL's. A population std is off by 15%
    # (groups of 4), an epsilon subtracted instead of added by 2e-4 / std.
    "advantage": ((1e-6, 3e-6), (1e-6, 3e-6), (1e-6, 3e-6)),
    # The reward statistics (`reward_stats`) keep the default rows: measured gaps, seeds 0-4, reference at most
    # 4.4e-16 (float64 sums of float32-exact scores), TRL 1.3e-7 absolute (float32 nanmean / nanstd).
    # So do the length statistics (`completion_lengths`: counts, a share, means of whole numbers): measured gaps,
    # seeds 0-9, reference 0 (float64 of integer lengths; float32, float64 and bfloat16 runs alike), TRL 1.12.0
    # at most 2.2e-7 absolute, 5e-8 relative (`float().mean()` of 13-16 lengths); min, max and the clipped ratio
    # exact. A length off by one token moves a mean by 1/16 or more.
    # not a logged metric: max |grad_a - grad_b| / max |grad_a| between two cuts of one minibatch, and the
    # part of a step's .grad that its micro-batches' (clipped) gradients do not explain
    "gradient": ((1e-9, 1e-9), (1e-5, 1e-5), (2e-2, 2e-2)),
    # not a logged metric: |selective_log_softmax's result - log_softmax(logits)[index]| at the spy (abs_tol only).
    # Measured on the reference trainer (uneven split, every call): 4.8e-7 at float32, 6.3e-7 at float64 (it
    # takes log_softmax in float32 even then), 1.6e-2 at bfloat16 (the result rounded to 8 bits of mantissa);
    # about fifteen times that. A gather at the wrong position is off by O(1).
    "logprob": ((1e-5, 0.0), (1e-5, 0.0), (2e-1, 0.0)),
    # not logged metrics: GRPO, the largest |selective_log_softmax's / entropy_from_logits' result - the float64
    # formula from the loss's logits| in a micro-batch (abs_tol only; harness/algorithms/grpo/logit_gaps.py).
    # Measured, uneven_lengths (temperature 1 and 0.7), extremes and all_masked, seeds 0-2, log-probs / entropies:
    # reference float32 7.2e-7 / 1.1e-6, float64 4.7e-7 / 7.2e-7 (its log_softmax runs in float32), bfloat16
    # 1.5e-2 / 5.9e-7; TRL 1.12.0 float32 7.9e-7 / 6.0e-7, bfloat16 2.2e-2 / 2.4e-2 (TRL does not build float64
    # runs). About ten times the largest. An entropy of the logits before the temperature (0.7) is off by O(0.1).
    "logit_gap/logps": ((1e-5, 0.0), (1e-5, 0.0), (2.5e-1, 0.0)),
    "logit_gap/entropies": ((1e-5, 0.0), (1e-5, 0.0), (2.5e-1, 0.0)),
    # not logged metrics: the largest gap between a per-token value the trainer handed to masked_mean and the
    # formula of docs/metrics.md (scale: mean |formula value|). Measured on the reference (uneven split, 1 and 2
    # epochs): pg_loss 0 at float64, 6.4e-7 of the scale at float32, 2.8e-2 at bfloat16; about fifteen times
    # that. A clip indicator is 0 or 1: one token on the wrong side (away from the edge, see signal.py) fails.
    "per_token/pg_loss": ((1e-9, 0.0, 1e-6), (1e-6, 0.0, 1e-5), (0.0, 0.0, 4e-1)),
    "per_token/pg_clipfrac": ((0.5, 0.0), (0.5, 0.0), (0.5, 0.0)),
    # not a logged metric: the largest |dL/dlogp_new recorded - formula| per token (scale: mean |formula| over R).
    # Measured on the reference (LR-0 cuts 4+2 and 2+2+2, the uneven split over 2 epochs, seed 0): 5e-7 of the
    # scale at float32, 5e-16 at float64; float32's row is twenty times that, float64 keeps the float32 allowance
    # of the table's other rows (trainers take log_softmax in float32 even in float64 runs). bfloat16 as the
    # per-token loss. A normaliser off by any factor is off by (factor - 1) times the scale.
    "gradient/logp": ((0.0, 0.0, 1e-6), (0.0, 0.0, 1e-5), (0.0, 0.0, 4e-1)),
    # not a logged metric: GRPO, the largest |dL/dlogp recorded - formula| / (|formula| + mean |formula| over the
    # masks) per token (scale 1; harness/algorithms/grpo/gradients.py). Measured on the reference GRPO trainer, every
    # logp_gradient case (uneven lengths for each loss type, windows 3+1, clipped runs with beta 0.04, 0 and the KL
    # uncorrected, windows of one completion), seeds 0-4: at most 4.5e-7 at float32, 6.9e-16 at float64, 1.4e-2 at
    # bfloat16; TRL 1.12.0 at float32, seeds 0-2, the nine cases it passes: 2.6e-7 (bnpo fails by 0.52: a mean of
    # micro-batch means). Rows: float32 about nine times that; float64 1e-6, the allowance of the table's other
    # float64 rows for a trainer that builds its loss in float32 even in a float64 run (about eight float32 ulps);
    # bfloat16 about ten times. Relative to each token's own size, because with the ratios of the clipped runs (up
    # to 58) one token's gradient is sixty times the mean: measured against the mean alone, its float32 rounding
    # was 2.1e-5 of it. A normaliser off by a factor f is off by about |f - 1| / 2 or more.
    "gradient/logp_relative": ((0.0, 0.0, 1e-6), (0.0, 0.0, 4e-6), (0.0, 0.0, 1.5e-1)),
    # not a logged metric: the largest |dL/dv recorded - formula| per position of the value head's output
    # (scale: mean |formula| over V; value_gradients.py). Measured on the reference (LR-0 cuts 4+2 and 2+2+2, the
    # uneven split over 2 epochs, seeds 0-3; the example trainer gives the same numbers at seed 0): at most 1.3e-6
    # of the scale at float32, 5.8e-8 at float64 (not 0: the oracle's returns come from the float64 scores, the
    # trainer's from float32 ones, as for per_token/vf_loss), 5.8e-2 at bfloat16; the rows are about eight,
    # seventeen and seven times that. A sign flipped is off by at least twice the scale, a lost 0.5 by at least
    # the scale.
    "gradient/value": ((0.0, 0.0, 1e-6), (0.0, 0.0, 1e-5), (0.0, 0.0, 4e-1)),
    # not a logged metric: max |step gradient - token-weighted combination of its micro-batches' own gradients|
    # / max |combination| (decomposition.py). Measured on the reference, seeds 0-2: at most 4.8e-7 at float32 and
    # 1.1e-7 at float64 (the reference's log_softmax runs in float32, and its backward rounds the 1/N_R and 1/n_R,i
    # scaled upstream gradients differently); about ten to twenty times that. bfloat16 as "gradient".
    "gradient/decomposition": ((1e-6, 0.0), (1e-5, 0.0), (2e-2, 2e-2)),
    # The value side (harness/algorithms/ppo/value_signal.py), same kind of gap and scale. Measured, largest over
    # the uneven split (1 and 2 epochs) and the k3, whiten_eos and temperature profiles, gap / scale: on the
    # reference (the example trainer gives the same numbers) at float32 advantages_raw 4.6e-7, rewards 2.9e-7,
    # vf_loss 1.4e-6; TRL 1.12.0 vf_loss 5.4e-6; at float64 6.7e-8, 1.2e-7, 2.3e-7 (not 0: the reference hands
    # the scores over in float32 and the oracle reads the float64 values the reward gave). Tolerances: about
    # fifteen times the largest (nine times TRL's vf_loss). bfloat16, reference only: 3.1e-2, 3.1e-2, 9.7e-2;
    # thirteen times, ten times for vf_loss (a squared error of bfloat16 values against float64 returns).
    # Under the reward-model profile (scores read from the recorded reward head, float32 outputs), reference at
    # float32, seeds 0-2: advantages_raw 5.1e-7 of the scale at most, objective/scores exact (gap 0),
    # objective/rlhf_reward 2.3e-8 absolute; TRL 1.12.0, seed 0: objective/scores 8.4e-8 absolute. Within the rows.
    "per_token/advantages_raw": ((0.0, 0.0, 4e-6), (0.0, 0.0, 1e-5), (0.0, 0.0, 4e-1)),
    "per_token/rewards": ((0.0, 0.0, 4e-6), (0.0, 0.0, 1e-5), (0.0, 0.0, 4e-1)),
    "per_token/vf_loss": ((0.0, 0.0, 4e-6), (0.0, 0.0, 5e-5), (0.0, 0.0, 1.0)),
    "per_token/vf_clipfrac": ((0.5, 0.0), (0.5, 0.0), (0.5, 0.0)),
    # not logged metrics: the largest |log-prob (value) the trainer used - the network's own, recomputed in float64
    # on a float64 copy of its weights| over V (harness/algorithms/ppo/forward.py; abs_tol only). Measured at LR 0,
    # forward_recompute (both runs) and the temperature profile, seeds 0-3: float32 log-probs 5.0e-6 (reference
    # and the example trainer alike), 3.6e-6 (TRL 1.12.0); values 2.0e-6 (reference, example), 3.6e-6 (TRL); float64
    # log-probs 6.3e-7 (reference and example: their log_softmax runs in float32), values 0 (the same float64
    # operations; 1e-8 leaves room for another batching's float64 rounding); about ten times the largest.
    # bfloat16: a bfloat16 network and its float64 copy part by up to 2.3 in a log-prob and 3.2 in a value (reference,
    # seeds 0-3: 8-bit mantissas through two layers), so the rows are ten times that and the check there catches
    # only what is grossly wrong (NaN, the wrong network). At float32 an inverted attention mask, pads in the mask of
    # a left-padded prompt, real tokens replaced by 0, or logits multiplied by the temperature (0.7) instead of
    # divided put some log-prob off by 1.2 to 1.6 (measured, seed 0).
    "forward/logprob": ((1e-5, 0.0), (5e-5, 0.0), (25.0, 0.0)),
    "forward/value": ((1e-8, 0.0), (4e-5, 0.0), (32.0, 0.0)),
}

SAMPLING_Z = 5.0
"""`sampling` (harness/algorithms/ppo/sampling.py): the largest |Z| of a run's drawn tokens, Z = sum(-log p - H) /
sqrt(sum Var[log p]), which is about standard normal for tokens drawn from the rollout's own distribution.
Measured on the uneven split's two updates (about 200 drawn tokens): the reference at seeds 0-5, temperature 1,
|Z| at most 2.2; temperature 0.5 at most 1.8; TRL 1.12.0 at seeds 0-3 at most 0.6, and at 0.7 at most 0.8. For
tokens drawn as reported, |Z| > 5 has a chance of about 6e-7 per run. A rollout that samples at 0.5 but takes its
log-probs at 1 gives Z of -8.4 to -10.2 (seeds 0-3); greedy decoding -12 to -17."""

TABLE: dict[str, dict[str, Tolerance]] = {
    metric: {dtype: Tolerance(*row[i]) for i, dtype in enumerate(DTYPES)} for metric, row in _ROWS.items()
}
"""metric -> dtype -> Tolerance; the one place tolerances are set."""


def dtype_name(dtype: Any) -> str:
    """'float32' for "float32", torch.float32 or "torch.float32"."""
    return str(dtype).removeprefix("torch.")


def tolerance(metric: str, dtype: Any) -> Tolerance:
    """The (abs_tol, rel_tol) for `metric` logged by a trainer running in `dtype`."""
    name = dtype_name(dtype)
    if name not in DTYPES:
        raise HarnessConfigError(f"no tolerances for dtype {name!r}; known dtypes: {', '.join(DTYPES)}")
    return TABLE.get(metric, TABLE[DEFAULT])[name]


def _finite_float(value: Any) -> float | None:
    """float(value) when it is a finite number, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def close(logged: Any, expected: Any, tol: Tolerance | tuple[float, ...], scale: float | None = None) -> bool:
    """True when both are finite numbers within the tolerance's allowed gap of each other."""
    x, y = _finite_float(logged), _finite_float(expected)
    if x is None or y is None:
        return False
    return abs(x - y) <= Tolerance(*tol).allowed(y, scale)
