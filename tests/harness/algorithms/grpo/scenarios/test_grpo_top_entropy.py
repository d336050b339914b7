"""logp_gradient[run=top_entropy]: TRL's entropy mask (`top_entropy_quantile`) on the extremes geometry. The case reads
the run its spec says, passes the reference (whose pooled policy_loss is the oracle's too), fails a trainer that
masks no token, and refuses a run judged without a mask; the settings reach the reference and TRL's trainers."""

from __future__ import annotations

import pytest

from harness.algorithms import case
from harness.algorithms.grpo import runs
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.targets.trl.config import trl_args
from harness.errors import HarnessConfigError
from harness.instrument.observe import Observation
from reference_trainers import ConfigError, grpo
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, assert_policy_loss_follows, ignoring

CHECK = "logp_gradient[run=top_entropy]"


def test_the_case_runs_the_extremes_geometry_with_the_papers_quantile():
    spec = gradient_scenarios.run_spec(GRPOSpec(), case(CHECK, "grpo"))
    assert spec == runs.top_entropy_spec(GRPOSpec())
    assert spec.top_entropy_quantile == runs.TOP_ENTROPY_QUANTILE == 0.2 and spec.beta != 0  # the KL term stays on
    assert spec.with_(name="extremes", top_entropy_quantile=1.0) == runs.clipping(GRPOSpec())
    assert trl_args(spec, "out", {})["top_entropy_quantile"] == 0.2
    assert trl_args(GRPOSpec(), "out", {})["top_entropy_quantile"] == 1.0


def test_a_quantile_outside_0_1_is_a_configuration_error():
    with pytest.raises(HarnessConfigError, match="top_entropy_quantile=1.5"):
        GRPOSpec(top_entropy_quantile=1.5).validate()
    with pytest.raises(ConfigError, match="top_entropy_quantile"):
        grpo.GRPOConfig(top_entropy_quantile=-0.1)


@pytest.fixture(scope="module")
def masked():
    return reference("grpo").get(runs.top_entropy_spec(GRPOSpec()), spy=False)


@pytest.fixture(scope="module")
def unmasked(masked):
    """The run by a trainer that ignores top_entropy_quantile, judged as the case's run."""
    return ignoring(masked, top_entropy_quantile=1.0)


def test_the_reference_passes_and_says_what_its_run_showed(masked):
    result = case(CHECK, "grpo").run(FixedCache.of(masked), GRPOSpec())
    assert result.passed, result.message
    assert "whose policy term the entropy mask leaves out" in result.message


def test_the_references_policy_loss_is_the_oracles_with_the_mask(masked):
    """Its logged policy_loss (dapo, the KL term in it) is the oracle's over the masked policy terms, not the
    unmasked one."""
    assert_policy_loss_follows(masked, masked.spec.with_(top_entropy_quantile=1.0))


def test_a_trainer_that_masks_no_token_fails_and_is_diagnosed(unmasked):
    result = case(CHECK, "grpo").run(FixedCache.of(unmasked), GRPOSpec())
    assert not result.passed, result.message
    diagnoses = [m.diagnosis for m in result.metrics if m.diagnosis is not None]
    assert any(77 in d.classes and "without the entropy mask" in d.formula for d in diagnoses), result.metrics


def test_a_run_judged_without_a_mask_is_refused(masked):
    """Judged at top_entropy_quantile 1 the formula masks nothing: the case fails saying the run showed no mask."""
    plain = Observation(masked.spec.with_(top_entropy_quantile=1.0), masked.outcome)
    result = case(CHECK, "grpo").run(FixedCache.of(plain), GRPOSpec())
    assert not result.passed and "0 tokens of non-zero advantage" in result.message, result.message
