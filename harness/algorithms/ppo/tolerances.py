"""PPO's rows of the tolerance table (harness/tolerances.py says how a row is read and what the numbers mean).

metric -> ((abs, rel[, scale]) for float64, float32, bfloat16). Each number says where it comes from; the
general notes on the dtypes (the float64 rows' float32 rounding, bfloat16's 8-bit mantissa) are in
harness/tolerances.py beside the rows every algorithm shares.
"""

from __future__ import annotations

from harness.tolerances import F64, S32, ToleranceTable

# the pooled statistics of docs/metrics.md: see harness/tolerances.py for the float64, float32 and bfloat16 notes
ROWS: dict[str, tuple[tuple[float, ...], ...]] = {
    "loss/policy_avg": ((1e-7, 5e-7, 1e-6), (1e-6, 1e-5, S32), (4e-3, 1e-2)),
    "policy/clipfrac_avg": (F64, (1e-6, 1e-5, S32), (2e-3, 1e-2)),
    "loss/value_avg": (F64, (1e-6, 1e-5, S32), (2e-3, 1e-2)),
    "val/clipfrac_avg": (F64, (1e-6, 1e-5, S32), (2e-3, 1e-2)),
    "policy/approxkl_avg": (F64, (1e-7, 1e-4, S32), (5e-4, 2e-2)),
    "policy/entropy_avg": (F64, (1e-5, 1e-5, S32), (5e-3, 1e-2)),
    "val/ratio": (F64, (1e-5, 1e-5, S32), (2e-3, 5e-3)),
    "val/ratio_var": (F64, (1e-9, 1e-5, S32), (5e-4, 5e-2)),
    "objective/kl": (F64, (1e-5, 1e-5, S32), (1e-2, 1e-2)),
    "objective/entropy": (F64, (1e-5, 1e-5, S32), (1e-2, 1e-2)),
    "objective/non_score_reward": (F64, (1e-6, 1e-5, S32), (1e-3, 2e-2)),
    "objective/scores": (F64, (1e-5, 1e-5, S32), (1e-2, 1e-2)),
    "objective/rlhf_reward": (F64, (1e-5, 1e-5, S32), (1e-2, 1e-2)),
    # not a logged metric: |selective_log_softmax's result - log_softmax(logits)[index]| at the spy (abs_tol only).
    # Measured on the reference trainer (uneven split, every call): 4.8e-7 at float32, 6.3e-7 at float64 (it
    # takes log_softmax in float32 even then), 1.6e-2 at bfloat16 (the result rounded to 8 bits of mantissa);
    # about fifteen times that. A gather at the wrong position is off by O(1).
    "logprob": ((1e-5, 0.0), (1e-5, 0.0), (2e-1, 0.0)),
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
    # The value side (harness/algorithms/ppo/oracle/value_signal.py), same kind of gap and scale. Measured, largest over
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
}

TOLERANCES = ToleranceTable.of("ppo", ROWS)
"""What PPO's checks are judged by: the shared rows and these, never another algorithm's."""
