"""The reference GRPO trainer logs a policy_loss that holds the KL term, as TRL's (policy_loss_includes_kl True):
declaring that it does not fails the pooled policy_loss where beta != 0, names the trl profile as what its numbers
are, and passes with TRL's value and at beta 0, where the KL term is 0 either way."""

from __future__ import annotations

import pytest

from tests.harness.algorithms.grpo.scenarios.test_grpo_declared_loss_gate import formula, judged

EXCLUDED = {"policy_loss_includes_kl": False}


@pytest.mark.parametrize("check_id", ["uneven_lengths[loss_type=grpo]", "uneven_lengths[loss_type=dapo]", "extremes"])
def test_a_policy_loss_without_the_kl_declared_on_a_trainer_that_logs_it_fails_and_names_the_trl_profile(check_id):
    assert judged(check_id, "trl").passed
    result = judged(check_id, EXCLUDED)
    assert formula(result, "policy_loss").startswith("policy_loss_includes_kl True (the trl profile's), where the "
                                                     "target declares policy_loss_includes_kl False")  # fmt: skip
    assert not any(m.failed for m in result.metrics if m.name != "policy_loss")  # the kl it logs is the same


def test_at_beta_0_the_entry_changes_nothing():
    assert judged("no_kl", EXCLUDED).passed
