"""The reference GRPO trainer logs kl as the token mean of its interval whatever the loss type (the contract's
kl_population): declaring verl's, the loss type's own aggregate of k3, on it fails the pooled kl of the loss types
that do not aggregate as a token mean (grpo's mean of completions' token means, dr_grpo's token sums over
max_completion_length), names the trl profile as what its numbers are, and passes with TRL's value. Under dapo the
two are one number."""

from __future__ import annotations

import pytest

from tests.harness.algorithms.grpo.scenarios.test_grpo_declared_loss_gate import formula, judged

AS_LOSS = {"kl_population": "as_loss"}


@pytest.mark.parametrize("check_id", ["uneven_lengths[loss_type=grpo]", "uneven_lengths[loss_type=dr_grpo]"])
def test_the_kl_aggregated_as_the_loss_declared_on_a_token_mean_trainer_fails_and_names_the_trl_profile(check_id):
    assert judged(check_id, "trl").passed
    result = judged(check_id, AS_LOSS)
    assert formula(result, "kl").startswith("kl_population token_mean (the trl profile's), where the target "
                                            "declares kl_population as_loss")  # fmt: skip
    assert {m.name for m in result.metrics if m.failed} == {"kl"}


def test_a_token_mean_loss_type_logs_the_same_kl_either_way():
    assert judged("uneven_lengths[loss_type=dapo]", AS_LOSS).passed
