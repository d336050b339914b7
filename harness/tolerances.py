"""One table of tolerances: per logged metric and per dtype, (abs_tol, rel_tol).

A logged value `x` is close to the oracle's `y` when `|x - y| <= abs_tol + rel_tol * |y|`
and both are finite. The oracle recomputes in float64 from the trainer's own tensors, so
the gap is only the trainer's reduction rounding in its working dtype: the tolerances are
a few ulps of that dtype, far below the size of any pooling bug in the catalogue.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from harness.errors import HarnessConfigError


class Tolerance(NamedTuple):
    """Allowed gap: `abs_tol + rel_tol * |expected|`."""

    abs_tol: float
    rel_tol: float

    def allowed(self, expected: float) -> float:
        """The largest gap accepted around `expected`."""
        return self.abs_tol + self.rel_tol * abs(expected)


DTYPES = ("float64", "float32", "bfloat16")
DEFAULT = "*"
"""Row used for a metric that has no row of its own."""

# metric: ((abs, rel) for float64, float32, bfloat16).
# float64: trainers (TRL, reference_ppo) pass statistics through float32 buffers and
#   `.float()` casts even in float64 runs, so logged values carry float32 rounding (~1e-7).
# float32: the oracle uses the trainer's own per-token tensors; what is left is reduction
#   order (worst seen on the reference trainer: 6e-8 relative), with margin for GPU kernels.
# bfloat16: per-token values and their sums are rounded to 8 bits of mantissa (worst seen
#   on the reference trainer: 1.6e-3 relative for loss/value_avg, 8e-4 absolute for
#   loss/policy_avg); TRL sums in bfloat16, hence the margin.
_F64 = (1e-9, 5e-7)
_ROWS: dict[str, tuple[tuple[float, float], tuple[float, float], tuple[float, float]]] = {
    DEFAULT: (_F64, (1e-5, 1e-5), (5e-3, 2e-2)),
    "loss/policy_avg": (_F64, (1e-6, 1e-5), (4e-3, 1e-2)),
    "policy/clipfrac_avg": (_F64, (1e-6, 1e-5), (2e-3, 1e-2)),
    "loss/value_avg": (_F64, (1e-6, 1e-5), (2e-3, 1e-2)),
    "val/clipfrac_avg": (_F64, (1e-6, 1e-5), (2e-3, 1e-2)),
    "policy/approxkl_avg": (_F64, (1e-7, 1e-4), (5e-4, 2e-2)),
    "policy/entropy_avg": (_F64, (1e-5, 1e-5), (5e-3, 1e-2)),
    "val/ratio": (_F64, (1e-5, 1e-5), (2e-3, 5e-3)),
    "val/ratio_var": (_F64, (1e-7, 1e-3), (5e-4, 5e-2)),
    "objective/kl": (_F64, (1e-5, 1e-5), (1e-2, 1e-2)),
    "objective/entropy": (_F64, (1e-5, 1e-5), (1e-2, 1e-2)),
    "objective/non_score_reward": (_F64, (1e-6, 1e-5), (1e-3, 2e-2)),
    "objective/scores": (_F64, (1e-5, 1e-5), (1e-2, 1e-2)),
    "objective/rlhf_reward": (_F64, (1e-5, 1e-5), (1e-2, 1e-2)),
    # not a logged metric: max |grad_a - grad_b| / max |grad_a| between two cuts of one minibatch
    "gradient": ((1e-9, 1e-9), (1e-5, 1e-5), (2e-2, 2e-2)),
}

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


def close(logged: Any, expected: Any, tol: Tolerance | tuple[float, float]) -> bool:
    """True when both are finite numbers within `abs_tol + rel_tol * |expected|` of each other."""
    x, y = _finite_float(logged), _finite_float(expected)
    if x is None or y is None:
        return False
    abs_tol, rel_tol = tol
    return abs(x - y) <= abs_tol + rel_tol * abs(y)
