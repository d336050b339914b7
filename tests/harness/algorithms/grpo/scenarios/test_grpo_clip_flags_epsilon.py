"""extremes[run=clip_asymmetric]: the pooled clip statistics on logp_gradient[run=clip_asymmetric]'s run (epsilon_low
0.05, epsilon_high 0.6), whose flags must differ from those at TRL's default epsilon 0.2 somewhere, so that a
trainer that flags its clipped tokens at the default's constants fails; a run that cannot tell is refused."""

from __future__ import annotations

import pytest

from harness.algorithms import case
from harness.algorithms.grpo import runs
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import Observation
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache

CHECK = "extremes[run=clip_asymmetric]"


def test_it_reads_the_gradient_cases_run():
    gradient = gradient_scenarios.run_spec(GRPOSpec(), case("logp_gradient[run=clip_asymmetric]", "grpo"))
    assert gradient == runs.asymmetric_clip_spec(GRPOSpec())
    assert (gradient.epsilon_low, gradient.epsilon_high) == (0.05, 0.6)


@pytest.fixture(scope="module")
def asymmetric():
    return reference("grpo").get(runs.asymmetric_clip_spec(GRPOSpec()), spy=False)


def test_the_reference_passes_with_flags_that_differ_from_the_defaults(asymmetric):
    result = case(CHECK, "grpo").run(FixedCache.of(asymmetric), GRPOSpec())
    assert result.passed, result.message
    assert any("differs from its flag at 0.2" in note for note in result.notes)


def test_a_run_whose_bounds_are_the_default_is_refused(asymmetric):
    """Judged at epsilon 0.2 on both sides, no flag can differ from the default's: the case says the run does not
    tell the settings from the default rather than passing a trainer it could not judge."""
    default = Observation(asymmetric.spec.with_(epsilon_low=0.2, epsilon_high=0.2), asymmetric.outcome)
    result = case(CHECK, "grpo").run(FixedCache.of(default), GRPOSpec())
    assert not result.passed and "does not tell the settings from the default" in result.message
