"""logp_gradient[run=off_policy_mask]: TRL's off-policy sequence mask (`off_policy_mask_threshold`) on the extremes
geometry. The oracle's mask keeps a completion unless its advantage is negative and its mean old_logp - logp exceeds
the threshold, and leaves one within rounding of it uncompared; the case passes the reference (whose pooled
policy_loss is the oracle's too), fails a trainer that masks nothing, refuses a run that shows no drop, and the
setting reaches the reference's and TRL's trainers and is refused where a target has no such mask."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo import runs
from harness.algorithms.grpo.oracle.expect import Settings
from harness.algorithms.grpo.oracle.off_policy_mask import both, dropped, off_policy_mask, sequence_kl
from harness.algorithms.grpo.oracle.token_gradients import token_gradient
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.spec import GRPOSpec, parse_settings
from harness.algorithms.grpo.targets.openrlhf.config import refusal as openrlhf_refusal
from harness.algorithms.grpo.targets.trl.config import trl_args
from harness.algorithms.grpo.targets.verl.config import refusal as verl_refusal
from harness.errors import HarnessConfigError
from harness.instrument.observe import Observation
from reference_trainers import ConfigError, grpo
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, assert_policy_loss_follows, ignoring, record

CHECK = "logp_gradient[run=off_policy_mask]"
MASK = [[True, True, True], [True, True, False], [True, True, True], [False, False, False]]
NEW = [[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
# completion 0: estimate 0.5; 1: 1.0625 (its third token outside the mask; its second's ratio 0.88, inside grpo's
# clip range, so its policy term has a gradient); 2: -0.5; 3: empty
OLD = [[-0.5, -0.5, -0.5], [0.0, -1.875, 5.0], [-1.5, -1.5, -1.5], [9.0, 9.0, 9.0]]


def settings(threshold, beta=0.0, dtype="float64"):
    s = Settings.of(GRPOSpec(loss_type="grpo", beta=beta, dtype=dtype))
    return dataclasses.replace(s, off_policy_mask_threshold=threshold)


def test_each_completions_estimate_is_its_mean_old_minus_new_log_prob_over_its_mask():
    kl, size = sequence_kl(record(MASK, NEW, [-1.0, -1.0, -1.0, -1.0], old=OLD))
    assert kl.tolist() == [0.5, 1.0625, -0.5, 0.0] and size.tolist() == [0.5, 1.0625, 0.5, 0.0]


def test_a_completion_is_dropped_only_when_its_advantage_is_negative_and_its_estimate_above_the_threshold():
    negative = record(MASK, NEW, [-1.0, -1.0, -1.0, -1.0], old=OLD)
    mask = off_policy_mask(negative, settings(1.0))
    assert mask.kept.any(dim=1).tolist() == [True, False, True, False]  # the empty completion has no token to keep
    assert not mask.uncertain.any()
    at = off_policy_mask(negative, settings(1.0625))  # an estimate equal to the threshold is kept (<=), within rounding
    assert at.kept[1].any() and at.uncertain[1, :2].all() and not at.uncertain[1, 2]
    positive = record(MASK, NEW, [0.0, 1.0, 0.5, 2.0], old=OLD)  # advantage >= 0: kept whatever the estimate
    assert off_policy_mask(positive, settings(1.0)).kept.equal(positive.completion_mask)
    assert off_policy_mask(negative, settings(None)) is None


def test_on_policy_every_completion_is_kept_and_none_is_uncertain():
    on_policy = record(MASK, NEW, [-1.0, -1.0, -1.0, -1.0])  # no old log-probs: the ratio is 1, the estimate 0
    mask = off_policy_mask(on_policy, settings(1e-9))
    assert mask.kept.equal(on_policy.completion_mask) and not mask.uncertain.any()


def test_the_rounding_margin_is_the_log_probs_dtype_times_the_threshold_and_the_terms():
    """At float32 (1e-5) an estimate 2e-5 above 1 is within rounding of the threshold, at float64 (1e-9) not."""
    new = [[-1.0, -1.0, -1.0]]
    near = record([[True, True, True]], new, [-1.0], old=[[-1.0 + 1.00002] * 3])
    assert off_policy_mask(near, settings(1.0, dtype="float32")).uncertain.all()
    assert not off_policy_mask(near, settings(1.0, dtype="float64")).uncertain.any()


def test_the_two_masks_compose_and_either_alone_is_itself():
    negative = record(MASK, NEW, [-1.0, -1.0, -1.0, -1.0], old=OLD)
    sequence = off_policy_mask(negative, settings(1.0))
    entropy = dataclasses.replace(sequence, kept=negative.completion_mask & torch.tensor([[True, False, True]] * 4),
                                  uncertain=torch.zeros_like(sequence.uncertain), threshold=0.3)  # fmt: skip
    joined = both(entropy, sequence)
    assert joined.kept.equal(entropy.kept & sequence.kept) and joined.threshold == 0.3
    assert both(None, sequence) is sequence and both(entropy, None) is entropy and both(None, None) is None


def test_a_dropped_completions_policy_gradient_is_0_and_its_kl_gradient_stays():
    negative = record(MASK, NEW, [-1.0, -1.0, -1.0, -1.0], old=OLD, ref=[[-1.2] * 3] * 4)
    s, unmasked = settings(1.0, beta=0.04), settings(None, beta=0.04)
    masked, whole = token_gradient(negative, s).value, token_gradient(negative, unmasked).value
    policy = token_gradient(negative, dataclasses.replace(unmasked, beta=0.0)).value
    assert masked[[0, 2]].equal(whole[[0, 2]]) and policy[1, 1] != 0
    assert torch.allclose(masked[1], whole[1] - policy[1])  # completion 1: its KL term's alone
    assert token_gradient(negative, dataclasses.replace(s, beta=0.0)).value[1].eq(0).all()
    assert dropped(negative, s) == (1, 1)  # completion 1 dropped; 0 kept at 0.5 (2, at -0.5, not counted)


def test_the_case_runs_the_extremes_geometry_at_its_threshold():
    spec = gradient_scenarios.run_spec(GRPOSpec(), case(CHECK, "grpo"))
    assert spec == runs.off_policy_mask_spec(GRPOSpec())
    assert spec.off_policy_mask_threshold == runs.OFF_POLICY_MASK_THRESHOLD == 2.0 and spec.beta != 0
    assert spec.with_(name="extremes", off_policy_mask_threshold=None) == runs.clipping(GRPOSpec())
    assert trl_args(spec, "out", {})["off_policy_mask_threshold"] == 2.0
    assert trl_args(GRPOSpec(), "out", {})["off_policy_mask_threshold"] is None


def test_a_threshold_not_positive_is_a_configuration_error_and_set_refuses_it():
    with pytest.raises(HarnessConfigError, match="off_policy_mask_threshold=0"):
        GRPOSpec(off_policy_mask_threshold=0.0).validate()
    with pytest.raises(ConfigError, match="off_policy_mask_threshold"):
        grpo.GRPOConfig(off_policy_mask_threshold=-1.0)
    with pytest.raises(HarnessConfigError, match="off_policy_mask_threshold"):
        parse_settings(["off_policy_mask_threshold=0.5"])


def test_verl_and_openrlhf_declare_the_mask_not_applicable():
    spec = runs.off_policy_mask_spec(GRPOSpec())
    assert "off-policy sequence mask" in verl_refusal(spec)
    assert "off-policy sequence mask" in openrlhf_refusal(spec)
    assert "off-policy sequence mask" not in (verl_refusal(runs.clipping(GRPOSpec())) or "")


@pytest.fixture(scope="module")
def masked():
    return reference("grpo").get(runs.off_policy_mask_spec(GRPOSpec()), spy=False)


@pytest.fixture(scope="module")
def unmasked(masked):
    """The run by a trainer that ignores off_policy_mask_threshold, judged as the case's run."""
    return ignoring(masked, off_policy_mask_threshold=None)


def test_the_reference_passes_and_says_what_its_run_showed(masked):
    result = case(CHECK, "grpo").run(FixedCache.of(masked), GRPOSpec())
    assert result.passed, result.message
    assert "whose policy term the off-policy mask drops" in result.message


def test_the_references_policy_loss_is_the_oracles_with_the_mask(masked):
    """Its logged policy_loss (dapo, the KL term in it) is the oracle's over the masked policy terms, not the
    unmasked one."""
    assert_policy_loss_follows(masked, masked.spec.with_(off_policy_mask_threshold=None))


def test_a_trainer_that_masks_nothing_fails_and_is_diagnosed(unmasked):
    result = case(CHECK, "grpo").run(FixedCache.of(unmasked), GRPOSpec())
    assert not result.passed, result.message
    diagnoses = [m.diagnosis for m in result.metrics if m.diagnosis is not None]
    assert any(97 in d.classes and "without the off-policy sequence mask" in d.formula for d in diagnoses), diagnoses


def test_a_run_that_drops_nothing_is_refused(masked):
    """Judged at a threshold above every estimate, the formula drops nothing: the case fails saying the run showed
    no mask, rather than passing on a comparison that could not tell the mask from none."""
    plain = Observation(masked.spec.with_(off_policy_mask_threshold=1e6), masked.outcome)
    result = case(CHECK, "grpo").run(FixedCache.of(plain), GRPOSpec())
    assert not result.passed and "0 completions of negative advantage whose policy term" in result.message, (
        result.message)
