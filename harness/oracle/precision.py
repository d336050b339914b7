"""How far a correct trainer's logged mean can sit from the oracle's, derived from what was recorded.

The oracle pools, in float64, the very per-token values the trainer held (or recomputes them with the
trainer's formula from values it held). The gap between its number and the trainer's is then only the
arithmetic the trainer did after those values existed: the per-token formula, the sums, the division, the
store of the logged number. Rounding that arithmetic is bounded by the dtype it ran in and the number and size
of its terms (the standard bounds: Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., 2.2 and
4.2), not by the dtype the model was trained in: a bfloat16 model whose log-probs come out in float32 is
judged at float32. docs/tolerances.md writes the derivation out; every constant below says where it comes from.

A `Precision` travels with an `Expectation`; `bound` is the comparison's tolerance and `resolution` the size of
one honest rounding, which `fits_better` uses to tell a known wrong formula that reproduces the logged number
from the contract's that only comes near it (harness/diagnose.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
"""u = half the distance from 1 to the next number of the dtype (IEEE 754 binary64 and binary32; binary16; bfloat16's
8-bit significand)."""
ACCUMULATOR = {"float64": "float64", "float32": "float32", "float16": "float32", "bfloat16": "float32"}
"""The dtype torch accumulates a sum of each dtype in, on the CPU and on CUDA alike (its reduction kernels'
`acc_type`/`opmath_type`: float for Half and BFloat16)."""
STORE_FLOOR = "float32"
"""The finest dtype a logged number is assumed to pass through: trainers keep statistics in float32 buffers and
`.float()` casts even in float64 runs (TRL, the reference trainers), so a partial or logged value carries at least
float32 rounding."""
STAGES = 3
"""Partials of size up to sum |x| that a correct pooling stores in the terms' dtype: each micro-batch's sum, their
sum over an interval, the sum over ranks. Each store rounds by at most u * sum |x|."""
FORMULA_ROUNDINGS = 4
"""Roundings of the longest per-token formula the oracle redoes from recorded inputs (k3: exp, two subtractions,
a product with the ratio); each rounds by at most u times the size of its operands (`computed`)."""
SAFETY = 2.0
"""Room for kernels that round once more than the count above (fused GPU kernels, atomics in another order)."""
FIT_RATIO = 4.0
"""`fits_better`: how many honest roundings (`resolution`) the contract's value must miss the logged number by
before a known wrong formula that reproduces it within one rounding is preferred. Measured: the largest gap of a
correct trainer over its resolution, every pooled metric of every check at seeds 0-4, is 1.37 (the reference GRPO
trainer in bfloat16; 1.07 at float32; the example trainers 0.49), under a third of this (docs/tolerances.md)."""


def unit_roundoff(dtype: str) -> float:
    """u of `dtype` ('float32', 'torch.float32'); float32's for a dtype the table lacks (an integer copy)."""
    return UNIT_ROUNDOFF.get(str(dtype).removeprefix("torch."), UNIT_ROUNDOFF["float32"])


def coarsest(*dtypes: str | None) -> str | None:
    """The dtype of largest unit roundoff among `dtypes` (None ones ignored; None when all are)."""
    known = [str(d).removeprefix("torch.") for d in dtypes if d is not None]
    return max(known, key=unit_roundoff) if known else None


@dataclass(frozen=True)
class Precision:
    """The arithmetic behind one expected value: what the trainer held its terms in, how many, how large.

    `dtype`: the dtype of the per-token values as the trainer held them (recorded before the harness's float64
    copy). `terms`: how many were pooled. `magnitude`: their mean |value| (a pooled mean's scale). `computed`:
    the mean size of the operands of the per-token formula the oracle redid from recorded inputs (0 when it
    pooled recorded values as they were). `floor`: what the comparison allows beyond rounding (a clip flag's
    share of ratios within rounding of a bound, which may flip either way). `source`: where `dtype` was read.
    """

    dtype: str
    terms: int
    magnitude: float
    computed: float = 0.0
    floor: float = 0.0
    source: str = "records"

    @property
    def u(self) -> float:
        return unit_roundoff(self.dtype)

    @property
    def u_store(self) -> float:
        return max(self.u, unit_roundoff(STORE_FLOOR))

    @property
    def u_sum(self) -> float:
        return unit_roundoff(ACCUMULATOR.get(self.dtype, STORE_FLOOR))

    def bound(self, expected: float) -> float:
        """The largest gap a correct trainer's logged value can show around `expected`: the terms' sum in the
        accumulator ((ceil(log2 n) + 1) u_acc sum |x|), its stored partials (STAGES u sum |x|), the formula redone
        per token, the division and the logged value's store (2 u |y|); times SAFETY; plus `floor`."""
        depth = math.ceil(math.log2(max(self.terms, 1))) + 1
        pooled = (STAGES * self.u_store + depth * self.u_sum) * self.magnitude
        rounding = pooled + FORMULA_ROUNDINGS * self.u * self.computed + 2 * self.u_store * abs(expected)
        return SAFETY * rounding + self.floor

    def resolution(self, expected: float) -> float:
        """One honest rounding of each kind: of the logged value, of a partial, of the formula's operands."""
        return self.u_store * (abs(expected) + self.magnitude) + self.u * self.computed + self.floor

    def describe(self) -> str:
        """`96 float32 terms of size 3.45 (recorded dtype)`: what the tolerance was derived from."""
        extra = f", operands {self.computed:.3g}" if self.computed else ""
        floor = f", flips {self.floor:.3g}" if self.floor else ""
        return f"{self.terms} {self.dtype} terms of size {self.magnitude:.3g}{extra}{floor} ({self.source})"


def fits_better(precision: Precision, logged: float, expected: float, candidate: float) -> bool:
    """Whether `candidate` (a known wrong formula's value) explains `logged` and the contract's `expected` does
    not: the candidate within one honest rounding of it, the expected value more than FIT_RATIO roundings away."""
    if not all(map(math.isfinite, (logged, expected, candidate))):
        return False
    right, wrong = abs(logged - expected), abs(logged - candidate)
    return wrong <= precision.resolution(candidate) and right > FIT_RATIO * precision.resolution(expected)
