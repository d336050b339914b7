"""Tables of tolerances: per logged metric and per dtype, (abs_tol, rel_tol, scale_tol).

The rows every algorithm shares are here; each algorithm declares its own (`Algorithm.tolerances`, in its
folder's tolerances.py) and judges its checks by its own `ToleranceTable`: the shared rows and its own, never
another algorithm's. `tolerance(metric, dtype, table)` reads one table.

A logged value `x` is close to the oracle's `y` when both are finite and
`|x - y| <= abs_tol + rel_tol * |y| + scale_tol * scale`, where `scale` is the size of the
terms `y` is made of (mean |per-token value| for a pooled mean; see `Expectation.scale`).
The oracle recomputes in float64 from the trainer's own tensors, so the gap is only the
trainer's rounding in its working dtype and buffers; rounding a sum scales with its terms,
not with the sum, which can sit near 0 (a policy loss over whitened advantages). Each
number below says where it comes from; `nox -s tests` holds them to the precision suite
(tests/harness/algorithms/ppo/test_ppo_precision.py): correct float32-buffer trainers pass at float64, and a relative
error of 1e-3 in any of the eight pooled metrics fails at float32 and at float64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from harness.errors import HarnessConfigError
from harness.oracle.numbers import finite_float


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


DTYPES = ("float64", "float32", "bfloat16", "float16")
DEFAULT = "*"
"""Row used for a metric that has no row of its own."""

# Where the oracle pools values the trainer held (or redoes a per-token formula from them), the tolerance is not
# read from these rows: it is derived from the dtype the trainer held them in, their number and their size
# (harness/oracle/precision.py; docs/tolerances.md). The rows serve the comparisons the oracle makes otherwise:
# identities, one run's log against another's, recomputes from the networks, gradients.
#
# metric: ((abs, rel, scale) for float64, float32, bfloat16[, float16: the bfloat16 entry when not given]).
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
F64 = (1e-9, 5e-7, 1e-6)
"""The float64 row most metrics take (see the notes above)."""
S32 = 1e-6
"""The float32 scale term most metrics take."""
_ROWS: dict[str, tuple[tuple[float, ...], ...]] = {
    DEFAULT: (F64, (1e-5, 1e-5, S32), (5e-3, 2e-2)),
    # not a logged metric: max |grad_a - grad_b| / max |grad_a| between two cuts of one minibatch, and the
    # part of a step's .grad that its micro-batches' (clipped) gradients do not explain
    "gradient": ((1e-9, 1e-9), (1e-5, 1e-5), (2e-2, 2e-2)),
    # not logged metrics: the largest |log-prob (value) the trainer used - the network's own, recomputed in float64
    # on a float64 copy of its weights| over V (harness/checks/forward.py; abs_tol only). Measured at LR 0,
    # forward_recompute (both runs) and the temperature profile, seeds 0-3: float32 log-probs 5.0e-6 (reference
    # and the example trainer alike), 3.6e-6 (TRL 1.12.0); values 2.0e-6 (reference, example), 3.6e-6 (TRL); float64
    # log-probs 6.3e-7 (reference and example: their log_softmax runs in float32), values 0 (the same float64
    # operations; 1e-8 leaves room for another batching's float64 rounding); about ten times the largest.
    # bfloat16: a bfloat16 network and its float64 copy part by up to 2.3 in a log-prob and 3.2 in a value (reference,
    # seeds 0-3: 8-bit mantissas through two layers), so the rows are ten times that and the check there catches
    # only what is grossly wrong (NaN, the wrong network). At float32 an inverted attention mask, pads in the mask of
    # a left-padded prompt, real tokens replaced by 0, or logits multiplied by the temperature (0.7) instead of
    # divided put some log-prob off by 1.2 to 1.6 (measured, seed 0).
    # GRPO (algorithms/grpo/scenarios/forward.py: the loss's, old and reference log-probs and the entropies of every
    # loss record, LR 0, temperature 0.5), seeds 0-4: reference float32 log-probs 9.6e-6 (seed 4; 2.3e-6 to 4.5e-6
    # at the others), entropies 3.2e-6; float64 0 and 2.7e-15; TRL 1.12.0 float32, seeds 0-2, 5.7e-6 and 2.4e-6.
    # At temperature 0.7 (measured first): bfloat16 1.62 (a reference log-prob, seed 3) and 0.48, TRL's 0.071 and
    # 0.057; 1.16.0 (its fused head) 5.6e-7 and 1.3e-6 at float32. The float32 row is five times the largest; the
    # entropy row is the log-prob row: the same forward, the same rounding. Logits not shifted by one position
    # put the log-probs nats off (no prompt explains a row).
    "forward/logprob": ((1e-5, 0.0), (5e-5, 0.0), (25.0, 0.0)),
    "forward/value": ((1e-8, 0.0), (4e-5, 0.0), (32.0, 0.0)),
    "forward/entropy": ((1e-5, 0.0), (5e-5, 0.0), (25.0, 0.0)),
}


SAMPLING_Z = 5.0
"""`sampling` (harness/checks/sampling.py): the largest |Z| of a run's drawn tokens, Z = sum(-log p - H) /
sqrt(sum Var[log p]), which is about standard normal for tokens drawn from the rollout's own distribution.
Measured on the uneven split's two updates (about 200 drawn tokens): the reference at seeds 0-5, temperature 1,
|Z| at most 2.2; temperature 0.5 at most 1.8; TRL 1.12.0 at seeds 0-3 at most 0.6, and at 0.7 at most 0.8. For
tokens drawn as reported, |Z| > 5 has a chance of about 6e-7 per run. A rollout that samples at 0.5 but takes its
log-probs at 1 gives Z of -8.4 to -10.2 (seeds 0-3); greedy decoding -12 to -17."""

# The rounding margins of a clip decision, one copy for every algorithm (PPO's training signal and gradients,
# GRPO's clip metrics and token gradients). Where a value lies this close to the edge of a clip, the trainer's
# rounding in its dtype may put it on either side: its flag is not compared, or allowed to flip.
CLIP_MARGIN = {"float64": 1e-9, "float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}
"""Distance of a ratio from a clip bound (GRPO: relative to the bound; PPO: of the ratio from 1 +- eps, and of a new
value from v_old +- cliprange_value) within which a trainer's rounding in the dtype may put it on either side: a flag
that close is uncertain (not compared, or allowed to flip). bfloat16 ratios near 1.2 are 1/128 apart, and flips were
measured at 1e-2 from the edge (PPO's training signal); float16 has eight times bfloat16's resolution (without its
entry, PPO's training signal judged float16 flags by float32's margin and failed ratios that rounded across the
edge: reference, float16, seeds 3 and 4); float32's is about 170 u, room for a ratio of log-probs that rounded
before their difference."""
TIE_MARGIN = {"float64": 1e-9, "float32": 1e-5, "float16": 1.5e-2, "bfloat16": 1e-1}
"""PPO's value clip indicator: tokens whose two squared errors are this close (relative to 1 + the larger) may be
ordered either way by a trainer whose returns carry its dtype's rounding: their clip indicator, and its gradient,
are not compared. Measured at bfloat16 (reference, uneven split): one flip at a near tie, the oracle's returns 3e-2
from the trainer's."""


def margin_of(dtype: str | None) -> float:
    """CLIP_MARGIN of `dtype`; float32's for a dtype the table lacks."""
    return CLIP_MARGIN.get(str(dtype).removeprefix("torch."), CLIP_MARGIN["float32"])


def tie_margin_of(dtype: str) -> float:
    """TIE_MARGIN of `dtype`; float32's for a dtype the table lacks."""
    return TIE_MARGIN.get(dtype, TIE_MARGIN["float32"])


def _rows_of(rows: dict) -> dict[str, dict[str, Tolerance]]:
    """metric -> dtype -> Tolerance of rows given for (float64, float32, bfloat16[, float16]). A row without a
    float16 entry takes its bfloat16 one: float16 keeps 11 bits of significand to bfloat16's 8, so whatever
    rounding a bfloat16 row allows bounds float16's (its range is smaller, which rounding does not widen)."""
    return {
        metric: {dtype: Tolerance(*row[min(i, len(row) - 1)]) for i, dtype in enumerate(DTYPES)}
        for metric, row in rows.items()
    }


SHARED: dict[str, dict[str, Tolerance]] = _rows_of(_ROWS)
"""The rows every algorithm shares: the default and the gradient comparisons of the neutral core."""


@dataclass(frozen=True)
class ToleranceTable:
    """One algorithm's tolerances: the shared rows and its own (`own`, as its folder's tolerances.py declares
    them), metric -> dtype -> Tolerance in `rows`. Another algorithm's rows are never in it."""

    algorithm: str
    own: Mapping[str, tuple[tuple[float, ...], ...]]
    rows: Mapping[str, Mapping[str, Tolerance]]

    @classmethod
    def of(cls, algorithm: str, own: Mapping[str, tuple[tuple[float, ...], ...]]) -> ToleranceTable:
        """The table of `algorithm`, whose own rows are `own`; a HarnessConfigError where one of them gives a
        shared metric another row (the shared rows judge the neutral core's comparisons alike for every algorithm)."""
        rows = _rows_of(dict(own))
        for metric in sorted(rows.keys() & SHARED.keys()):
            if rows[metric] != SHARED[metric]:
                raise HarnessConfigError(
                    f"tolerance rows for {metric!r} differ between the shared rows and {algorithm}"
                )
        return cls(algorithm, dict(own), {**SHARED, **rows})


def dtype_name(dtype: Any) -> str:
    """'float32' for "float32", torch.float32 or "torch.float32"."""
    return str(dtype).removeprefix("torch.")


def tolerance(metric: str, dtype: Any, table: ToleranceTable) -> Tolerance:
    """The Tolerance for `metric` logged by a trainer running in `dtype`, from the table of the algorithm it is
    judged for (its own row, else the shared one, else the default row)."""
    name = dtype_name(dtype)
    if name not in DTYPES:
        raise HarnessConfigError(f"no tolerances for dtype {name!r}; known dtypes: {', '.join(DTYPES)}")
    return table.rows.get(metric, table.rows[DEFAULT])[name]


def close(logged: Any, expected: Any, tol: Tolerance | tuple[float, ...], scale: float | None = None) -> bool:
    """True when both are finite numbers within the tolerance's allowed gap of each other."""
    x, y = finite_float(logged), finite_float(expected)
    if x is None or y is None:
        return False
    return abs(x - y) <= Tolerance(*tol).allowed(y, scale)
