"""The reference GRPO trainer implements TRL's loss (no KL clamp, the KL weighted as use_bias_correction_kl says, no
dual clip): declaring verl's loss entries on it fails the check whose run reaches the declared bound, names the trl
profile as what its numbers are, and passes with TRL's values. At seed 0 the reference's extremes runs hold tokens
with A < 0 and a ratio above 3 (1 to 3 per run) and tokens whose k3 is above 10 (k3 up to 147)."""

from __future__ import annotations

import pytest

from harness.algorithms import case
from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.spec import GRPOSpec
from harness.targets import Target
from tests.support.gates import declaring, reference


def judged(check_id: str, declared):
    """The result of `check_id` on the reference GRPO trainer's runs (the session's), its target declaring
    `declared`."""
    target = Target("declares", "grpo", print, definitions=VOCABULARY.resolve(declared))
    return case(check_id, "grpo").run(declaring(reference("grpo"), target), GRPOSpec())


def formula(result, metric: str) -> str:
    verdict = next(m for m in result.metrics if m.name == metric)
    assert verdict.failed
    return verdict.diagnosis.formula if verdict.diagnosis is not None else ""


GRADIENT = "gradient/logp_relative"


def test_a_dual_clip_declared_on_a_trainer_without_one_fails_the_gradient_where_a_ratio_passes_it():
    assert judged("logp_gradient[run=beta0]", "trl").passed
    result = judged("logp_gradient[run=beta0]", {"dual_clip_ratio": 3.0})
    assert not result.passed and any("held by the dual clip" in n for n in result.notes)
    assert formula(result, GRADIENT).startswith("the formula with dual_clip_ratio None (the trl profile's), where the "
                                                "target declares dual_clip_ratio 3")  # fmt: skip
    assert judged("logp_gradient[run=beta0]", {"dual_clip_ratio": 100.0}).passed  # no ratio reaches it


def test_a_kl_clamp_declared_on_a_trainer_without_one_fails_the_gradient_and_the_pooled_kl():
    assert judged("logp_gradient[run=kl_uncorrected]", "trl").passed
    result = judged("logp_gradient[run=kl_uncorrected]", {"kl_clamp": 10.0})
    assert formula(result, GRADIENT).startswith("the formula with kl_clamp None (the trl profile's)")
    pooled = judged("extremes", {"kl_clamp": 10.0})
    assert formula(pooled, "kl").startswith("kl_clamp None (the trl profile's), where the target declares kl_clamp 10")
    assert judged("extremes", "trl").passed and judged("extremes", {"kl_clamp": 1000.0}).passed


@pytest.mark.parametrize("check_id", ["logp_gradient[run=extremes]", "logp_gradient[loss_type=grpo]"])
def test_an_unweighted_kl_declared_on_a_trainer_that_weights_it_fails_where_the_run_asks_for_the_weight(check_id):
    result = judged(check_id, {"kl_importance_weighting": "never"})
    assert formula(result, GRADIENT).startswith("the formula with kl_importance_weighting as_configured (the trl "
                                                "profile's)")  # fmt: skip
    # the run that sets use_bias_correction_kl=False weights nothing under either value
    assert judged("logp_gradient[run=kl_uncorrected]", {"kl_importance_weighting": "never"}).passed


def test_verls_profile_on_a_trainer_of_trls_definitions_fails_and_names_the_trl_profile():
    result = judged("logp_gradient[run=beta0]", "verl")
    trl = "kl_clamp None, kl_importance_weighting as_configured, dual_clip_ratio None (the trl profile's)"
    assert formula(result, GRADIENT).startswith(f"the formula with {trl}")
    pooled = judged("uneven_lengths[loss_type=grpo]", "verl")  # the kl also reads how it pools and weighs tokens
    assert formula(pooled, "kl").startswith(trl.replace(" (the", ", metric_pooling interval, kl_population token_mean "
                                                                 "(the"))  # fmt: skip
