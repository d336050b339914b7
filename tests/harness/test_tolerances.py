"""Tolerances are looked up per algorithm: the shared rows and the algorithm's own, never another algorithm's."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import algorithms
from harness.algorithms import get, known_algorithms
from harness.algorithms.grpo.tolerances import TOLERANCES as GRPO
from harness.algorithms.ppo.tolerances import TOLERANCES as PPO
from harness.compare import compare
from harness.errors import HarnessConfigError
from harness.tolerances import DEFAULT, SHARED, Tolerance, ToleranceTable, tolerance

THIRD = Path(__file__).resolve().parents[1] / "support" / "third_algorithm"


@pytest.fixture
def three_algorithms(monkeypatch: pytest.MonkeyPatch):
    """The made-up algorithm of tests/support/third_algorithm/ registered beside PPO and GRPO, in this process."""
    monkeypatch.syspath_prepend(str(THIRD))
    every = {**algorithms.found(), "tokenmean": "tokenmean.algorithm:TOKENMEAN"}
    monkeypatch.setattr(algorithms, "found", lambda: every)
    get.cache_clear()
    yield
    get.cache_clear()


def test_grpos_entropy_keeps_the_shared_default_when_another_algorithm_declares_an_entropy_row(three_algorithms):
    from tokenmean.tolerances import TOLERANCES as TOKENMEAN

    assert known_algorithms() == ["ppo", "grpo", "tokenmean"]
    own = Tolerance(*get("tokenmean").tolerances["entropy"][1])  # its float32 entry, as declared to the registry
    default = SHARED[DEFAULT]["float32"]
    assert own.abs_tol > 1e3 * default.allowed(1.0, 1.0)  # a row no one could mistake for the default
    assert tolerance("entropy", "float32", GRPO) == default
    assert tolerance("entropy", "float32", TOKENMEAN) == own
    # the same gap, judged for each algorithm: GRPO fails it by the default, the made-up algorithm passes it by its row
    (grpo,) = compare({"entropy": 1.1}, {"entropy": 1.0}, "float32", GRPO, kind="partition")
    (made_up,) = compare({"entropy": 1.1}, {"entropy": 1.0}, "float32", TOKENMEAN, kind="partition")
    assert grpo.failed and grpo.tol == pytest.approx(default.allowed(1.0))
    assert not made_up.failed and made_up.tol == pytest.approx(own.allowed(1.0))
    assert grpo.tol_source == made_up.tol_source == "the float32 row of entropy"


def test_a_table_holds_the_shared_rows_and_its_algorithms_own_only():
    assert set(GRPO.own) <= set(GRPO.rows) and set(PPO.own) <= set(PPO.rows)
    assert set(SHARED) <= set(GRPO.rows) and set(SHARED) <= set(PPO.rows)
    assert not set(PPO.own) & set(GRPO.rows) and not set(GRPO.own) & set(PPO.rows)
    # a PPO metric GRPO does not log is judged, for GRPO, by the default row, not by PPO's
    assert tolerance("loss/policy_avg", "float32", GRPO) == tolerance("*", "float32", GRPO)
    assert tolerance("loss/policy_avg", "float32", PPO) != tolerance("*", "float32", PPO)
    for name, table in (("ppo", PPO), ("grpo", GRPO)):
        assert table.algorithm == name and dict(table.own) == dict(get(name).tolerances)


def test_an_algorithm_may_not_give_a_shared_metric_another_row():
    with pytest.raises(HarnessConfigError, match="rows for 'gradient' differ between the shared rows and rloo"):
        ToleranceTable.of("rloo", {"gradient": ((1.0, 1.0), (1.0, 1.0), (1.0, 1.0))})
    same = ToleranceTable.of("rloo", {"gradient": ((1e-9, 1e-9), (1e-5, 1e-5), (2e-2, 2e-2))})
    assert same.rows["gradient"] == SHARED["gradient"]
