"""The sequence-level cases (GSPO): logp_gradient[run=sequence_level] and extremes[run=sequence_level] share one run,
pass the reference, and fail a trainer that takes token-level ratios when sequence-level ones are asked for."""

from __future__ import annotations

import pytest

from harness.algorithms import case
from harness.algorithms.grpo import runs
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.targets.trl.config import trl_args
from harness.errors import HarnessConfigError
from harness.instrument.observe import Observation
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache

GRADIENT = "logp_gradient[run=sequence_level]"
POOLED = "extremes[run=sequence_level]"


def test_the_two_cases_read_one_run_at_sequence_level_under_grpo():
    spec = gradient_scenarios.run_spec(GRPOSpec(), case(GRADIENT, "grpo"))
    assert spec == runs.sequence_level_spec(GRPOSpec())
    assert (spec.importance_sampling_level, spec.loss_type) == ("sequence", "grpo")
    assert spec.with_(importance_sampling_level="token", loss_type="dapo", name="extremes") == runs.clipping(GRPOSpec())


def test_an_unknown_level_is_refused_and_trl_is_handed_the_level():
    with pytest.raises(HarnessConfigError, match="importance_sampling_level='tokens'"):
        GRPOSpec(importance_sampling_level="tokens").validate()
    spec = runs.sequence_level_spec(GRPOSpec())
    assert trl_args(spec, "out", {})["importance_sampling_level"] == "sequence"
    assert trl_args(GRPOSpec(), "out", {})["importance_sampling_level"] == "token"


@pytest.fixture(scope="module")
def sequence_run():
    return reference("grpo").get(runs.sequence_level_spec(GRPOSpec()), spy=False)


@pytest.fixture(scope="module")
def token_run():
    """The same run by a trainer that takes token-level ratios although sequence-level ones are asked for."""
    spec = runs.sequence_level_spec(GRPOSpec())
    obs = reference("grpo").get(spec.with_(importance_sampling_level="token"), spy=False)
    return Observation(spec, obs.outcome)


@pytest.mark.parametrize("check_id", [GRADIENT, POOLED])
def test_the_reference_passes_the_sequence_level_cases(sequence_run, check_id):
    result = case(check_id, "grpo").run(FixedCache.of(sequence_run), GRPOSpec())
    assert result.passed, result.message
    if check_id == GRADIENT:
        assert any("completions clipped whole" in note for note in result.notes)


@pytest.mark.parametrize("check_id", [GRADIENT, POOLED])
def test_token_level_ratios_fail_the_sequence_level_cases(token_run, check_id):
    result = case(check_id, "grpo").run(FixedCache.of(token_run), GRPOSpec())
    assert not result.passed, result.message


def test_a_run_with_no_completion_clipped_is_refused(sequence_run):
    """The cases exist to show completions clipped whole: judged with a clip range no ratio of the run leaves,
    the gradient case fails saying it did not see the clipped branch, and the pooled case that it saw no clip."""
    wide = Observation(sequence_run.spec.with_(epsilon_low=1 - 1e-12, epsilon_high=1e12), sequence_run.outcome)
    gradient = case(GRADIENT, "grpo").run(FixedCache.of(wide), GRPOSpec())
    assert not gradient.passed and "did not show the clipped branch" in gradient.message
    pooled = case(POOLED, "grpo").run(FixedCache.of(wide), GRPOSpec())
    assert not pooled.passed and "completions clipped" in pooled.message
