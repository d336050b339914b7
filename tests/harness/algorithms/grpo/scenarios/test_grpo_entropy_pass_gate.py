"""The reference GRPO trainer logs the entropy of its update's own forward (the contract's entropy_pass) and records
no other pass: declaring verl's, the pass before the update, on it leaves the pooled entropy not recomputable, a
failure that names the missing field, never a pass; every other metric of the check is compared as before."""

from __future__ import annotations

from harness.verdict import MetricStatus
from tests.harness.algorithms.grpo.scenarios.test_grpo_declared_loss_gate import judged

CHECK = "uneven_lengths[loss_type=dapo]"


def test_the_pass_before_the_update_declared_on_a_trainer_that_records_none_fails_as_not_recomputable():
    assert judged(CHECK, "trl").passed
    result = judged(CHECK, {"entropy_pass": "before_update"})
    entropies = [m for m in result.metrics if m.name == "entropy"]  # one per logged interval
    assert entropies and all(m.failed and m.status is MetricStatus.NOT_RECOMPUTABLE for m in entropies)
    assert all("old_entropies" in m.reason for m in entropies)
    assert {m.name for m in result.metrics if m.failed} == {"entropy"}
