"""The reference GRPO trainer divides dapo's, cispo's and vespo's window loss by the generation's tokens times the
window's share (TRL's token_mean_scope): declaring verl's scope, each window over its own tokens, on it fails the
gradient of those loss types where a generation's windows hold different token counts, names the trl profile as what
its numbers are, and passes with TRL's value. The loss types that do not divide by a token count ignore it."""

from __future__ import annotations

import pytest

from tests.harness.algorithms.grpo.scenarios.test_grpo_declared_loss_gate import GRADIENT, formula, judged

WINDOW = {"token_mean_scope": "window"}


@pytest.mark.parametrize("check_id", ["logp_gradient[loss_type=dapo]", "logp_gradient[loss_type=cispo]",
                                      "logp_gradient[run=short_window]",
                                      "logp_gradient[run=off_policy,loss_type=vespo]"])  # fmt: skip
def test_the_window_scope_declared_on_a_trainer_of_the_generation_scope_fails_and_names_the_trl_profile(check_id):
    assert judged(check_id, "trl").passed
    assert formula(judged(check_id, WINDOW), GRADIENT).startswith(
        "the formula with token_mean_scope generation (the trl profile's), where the target declares "
        "token_mean_scope window"
    )


def test_verls_profile_names_every_loss_entry_and_the_scope_that_differ():
    trl = ("kl_clamp None, kl_importance_weighting as_configured, dual_clip_ratio None, token_mean_scope generation "
           "(the trl profile's)")  # fmt: skip
    assert formula(judged("logp_gradient[loss_type=dapo]", "verl"), GRADIENT).startswith(f"the formula with {trl}")


@pytest.mark.parametrize("check_id", ["logp_gradient[loss_type=grpo]", "logp_gradient[loss_type=bnpo]",
                                      "logp_gradient[loss_type=dr_grpo]"])  # fmt: skip
def test_a_loss_type_without_a_token_count_ignores_the_scope(check_id):
    assert judged(check_id, WINDOW).passed
