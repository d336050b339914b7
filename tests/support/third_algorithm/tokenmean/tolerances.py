"""The made-up algorithm's rows of the tolerance table: its metric's, and an `entropy` row of its own.

GRPO logs an `entropy` too and has no row for it: the shared default judges it. This row is
deliberately far from that default, so that a lookup that let one algorithm's rows judge another
algorithm's metric would show (tests/harness/test_tolerances.py).
"""

from __future__ import annotations

from harness.tolerances import ToleranceTable

ROWS: dict[str, tuple[tuple[float, ...], ...]] = {
    "toy/token_mean": ((1e-9, 1e-9), (1e-6, 1e-6), (1e-2, 1e-2)),
    "entropy": ((0.25, 0.0), (0.25, 0.0), (0.25, 0.0)),
}
TOLERANCES = ToleranceTable.of("tokenmean", ROWS)
"""What its check is judged by: the shared rows and these."""
