"""The gate from pytest: one test per check of the target's algorithm (parametrized by the plugin, named by check id),
each run by the session's engine (harness/engine.py `Gate.run`)."""

from __future__ import annotations

import pytest

from harness.report.format import assert_passed
from harness.verdict import CheckStatus


def test_check(ppo_case, ppo_gate):
    """Run one case into the session's report and fail with the reviewer's lines when it failed (with the contract
    changes that touch it, which the target may predate); a case the target declares it cannot run is recorded not
    applicable, with the declared reason, and skipped."""
    result = ppo_gate.run(ppo_case)
    if result.status is CheckStatus.NOT_APPLICABLE:
        pytest.skip(f"not applicable: {result.message}")
    assert_passed(result)


def test_sizes_that_do_not_divide_are_a_usage_error(ppo_target, ppo_run_spec, ppo_algorithm):
    """Not a check of the trainer: the harness itself rejects impossible geometry before any model work."""
    from harness.errors import HarnessConfigError
    from harness.instrument.observe import observe

    with pytest.raises(HarnessConfigError, match="not divisible"):
        observe(ppo_target, ppo_algorithm.impossible_spec(ppo_run_spec))
