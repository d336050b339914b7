"""Reading a logged or expected value as a number: one place for what counts as a float and as a finite one."""

from __future__ import annotations

import math
from typing import Any


def as_float(value: Any) -> float | None:
    """float(value), or None when it is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def finite_float(value: Any) -> float | None:
    """float(value) when it is a finite number, else None."""
    number = as_float(value)
    return number if number is not None and math.isfinite(number) else None
