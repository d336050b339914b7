"""The sequence-level cases of cispo, sapo and vespo: logp_gradient[run=sequence_level,loss_type=*] and
extremes[run=sequence_level,loss_type=cispo] read the runs their specs say, pass the reference, fail a trainer that
keeps each token's own ratio where the completion's is asked, and refuse a run that shows nothing of what the
sequence level changes for the loss type."""

from __future__ import annotations

import pytest

from harness.algorithms import case
from harness.algorithms.grpo import runs
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import Observation
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache

SOFT = ("cispo", "sapo", "vespo")
POOLED = "extremes[run=sequence_level,loss_type=cispo]"


def gradient_id(loss_type: str) -> str:
    return f"logp_gradient[run=sequence_level,loss_type={loss_type}]"


def test_each_case_runs_its_loss_type_at_sequence_level_on_the_off_policy_geometry():
    for loss_type in SOFT:
        spec = gradient_scenarios.run_spec(GRPOSpec(), case(gradient_id(loss_type), "grpo"))
        assert spec == runs.sequence_level_spec(GRPOSpec(), loss_type)
        assert (spec.importance_sampling_level, spec.loss_type, spec.name) == ("sequence", loss_type, "sequence_level")
        token = runs.off_policy_spec(GRPOSpec(), loss_type)  # its cap and its settings off their defaults aside
        assert spec.with_(importance_sampling_level="token", name="off_policy", epsilon_high=token.epsilon_high,
                          **runs.OFF_DEFAULT_SETTINGS.get(loss_type, {})) == token  # fmt: skip
    assert runs.sequence_level_spec(GRPOSpec(), "cispo").epsilon_high == runs.SEQUENCE_CISPO_CAP
    assert runs.sequence_level_spec(GRPOSpec(epsilon_high=2.0), "cispo").epsilon_high == 2.0  # the run's own cap
    vespo = runs.sequence_level_spec(GRPOSpec(beta=0.0, use_bias_correction_kl=False), "vespo")
    assert (vespo.beta, vespo.use_bias_correction_kl) == (GRPOSpec().beta, True)  # its KL's correction is the point
    assert runs.sequence_level_spec(GRPOSpec()) == gradient_scenarios.run_spec(
        GRPOSpec(), case("logp_gradient[run=sequence_level]", "grpo"))  # grpo's run is unchanged


@pytest.fixture(scope="module")
def sequence_runs():
    return {t: reference("grpo").get(runs.sequence_level_spec(GRPOSpec(), t), spy=False) for t in SOFT}


@pytest.fixture(scope="module")
def token_runs():
    """Each run by a trainer that keeps each token's own ratio although the completion's is asked for."""
    out = {}
    for loss_type in SOFT:
        spec = runs.sequence_level_spec(GRPOSpec(), loss_type)
        obs = reference("grpo").get(spec.with_(importance_sampling_level="token"), spy=False)
        out[loss_type] = Observation(spec, obs.outcome)
    return out


@pytest.mark.parametrize("loss_type", SOFT)
def test_the_reference_passes_and_says_what_its_run_showed(sequence_runs, loss_type):
    result = case(gradient_id(loss_type), "grpo").run(FixedCache.of(sequence_runs[loss_type]), GRPOSpec())
    assert result.passed, result.message
    shown = {"cispo": "above epsilon_high 0.5", "sapo": "sapo's gate bent", "vespo": "the KL's correction"}
    assert any(shown[loss_type] in note for note in result.notes), result.notes
    if loss_type == "cispo":  # its other run, on policy at cap 1 (every ratio the cap), from the reference too
        obs = sequence_runs["cispo"]
        served = FixedCache(lambda spec: obs if spec == obs.spec else reference("grpo").get(spec, spy=False))
        pooled = case(POOLED, "grpo").run(served, GRPOSpec())
        assert pooled.passed, pooled.message


@pytest.mark.parametrize("check_id", [*(gradient_id(t) for t in SOFT), POOLED])
def test_token_level_ratios_fail_the_cases(token_runs, check_id):
    loss_type = check_id.rsplit("=", 1)[1].rstrip("]")
    result = case(check_id, "grpo").run(FixedCache.of(token_runs[loss_type]), GRPOSpec())
    assert not result.passed, result.message


def test_a_cispo_run_with_no_completion_capped_is_refused(sequence_runs):
    """Judged with a cap no ratio reaches, the gradient case fails saying that no weight was capped, and the pooled
    one that no completion was flagged."""
    obs = sequence_runs["cispo"]
    wide = Observation(obs.spec.with_(epsilon_high=1e12), obs.outcome)
    gradient = case(gradient_id("cispo"), "grpo").run(FixedCache.of(wide), GRPOSpec())
    assert not gradient.passed and "0 completions whose ratio is above epsilon_high" in gradient.message
    pooled = case(POOLED, "grpo").run(FixedCache.of(wide), GRPOSpec())
    assert not pooled.passed and "completions clipped" in pooled.message


def test_a_sapo_run_whose_ratios_stay_at_1_is_refused():
    """At LR 0 every ratio is 1, where sapo's gate does not bend (its slope there is grpo's)."""
    spec = runs.sequence_level_spec(GRPOSpec(), "sapo")
    still = reference("grpo").get(spec.with_(learning_rate=0.0), spy=False)
    result = case(gradient_id("sapo"), "grpo").run(FixedCache.of(Observation(spec, still.outcome)), GRPOSpec())
    assert not result.passed and "0 completions whose ratio is 0.05 or more off 1" in result.message, result.message


def test_a_vespo_run_judged_without_the_kl_correction_is_refused(sequence_runs):
    """vespo's sequence level reaches its loss through the KL's correction alone: judged with the KL uncorrected,
    the run shows nothing of it (even at ratio 1 it does show: the correction's gradient spreads each completion's
    k3 over its tokens through the mean log-ratio)."""
    obs = sequence_runs["vespo"]
    plain = Observation(obs.spec.with_(use_bias_correction_kl=False), obs.outcome)
    result = case(gradient_id("vespo"), "grpo").run(FixedCache.of(plain), GRPOSpec())
    assert not result.passed and "0 tokens whose gradient changes with a ratio per token" in result.message
