"""The gate: one test per check of the target's algorithm (parametrized by the plugin, named by check id)."""

from __future__ import annotations

import pytest

from harness.report.format import check_failure_lines
from harness.verdict import CheckResult, CheckStatus


def test_check(ppo_case, ppo_cache, ppo_run_spec, ppo_report, ppo_contract_lines, ppo_not_applicable):
    """Run one case, record it in the report, and fail with the reviewer's lines when it failed (with the contract
    changes that touch it, which the target may predate); a case the target declares it cannot run is recorded not
    applicable, with the declared reason, and skipped."""
    reason = ppo_not_applicable(ppo_case)
    if reason is not None:
        ppo_report.add(CheckResult(ppo_case.id, CheckStatus.NOT_APPLICABLE, notes=(reason,)))
        pytest.skip(f"not applicable: {reason}")
    result = ppo_contract_lines(ppo_case.run(ppo_cache, ppo_run_spec))
    ppo_report.add(result)
    if not result.passed:
        pytest.fail("\n".join(check_failure_lines(result)), pytrace=False)


def test_sizes_that_do_not_divide_are_a_usage_error(ppo_target, ppo_run_spec, ppo_algorithm):
    """Not a check of the trainer: the harness itself rejects impossible geometry before any model work."""
    from harness.errors import HarnessConfigError
    from harness.instrument.observe import observe

    with pytest.raises(HarnessConfigError, match="not divisible"):
        observe(ppo_target, ppo_algorithm.impossible_spec(ppo_run_spec))
