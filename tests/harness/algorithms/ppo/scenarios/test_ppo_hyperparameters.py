"""The settings sweep's hyperparameters profile: gamma, lam, kl_coef, cliprange and cliprange_value off their defaults,
read by the oracle from the spec, and each check of the profile failing on a run where no number tells them."""

from __future__ import annotations

import pytest

from harness.algorithms import case
from harness.algorithms.ppo.oracle.scores import update_scores
from harness.algorithms.ppo.runs import UNEVEN, spec_for
from harness.algorithms.ppo.scenarios import hyperparameters, pooled
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.algorithms.ppo.view import view_of
from tests.support.gates import reference

PROFILE = pooled.PROFILES["hyperparameters"]
IDS = [f"settings_sweep[settings=hyperparameters,check={c}]" for c in pooled.SWEEP["hyperparameters"]]


def test_the_profile_moves_every_setting_off_its_default():
    defaults = ScenarioSpec()
    assert set(PROFILE) == {"gamma", "lam", "kl_coef", "cliprange", "cliprange_value"}
    assert all(value != getattr(defaults, name) for name, value in PROFILE.items())
    assert set(pooled.TOLD_READS) == set(pooled.SWEEP["hyperparameters"])
    assert all(set(reads) <= set(PROFILE) for reads in pooled.TOLD_READS.values())


@pytest.fixture(scope="module")
def reference_cache():
    return reference("ppo")


@pytest.fixture(scope="module")
def profile_run(reference_cache):
    """The run every check of the profile reads: the uneven split over two epochs at the profile's settings."""
    obs = reference_cache.get(spec_for(UNEVEN, ScenarioSpec(**PROFILE)).with_(num_ppo_epochs=2))
    view = view_of(obs)
    return view, obs.spec, update_scores(obs.ran, view.updates)


def test_the_reference_passes_the_profile(reference_cache):
    for check_id in IDS:
        result = case(check_id).run(reference_cache, ScenarioSpec())
        assert result.passed, f"{check_id}: {result.message}"


def test_the_oracle_reads_each_setting_from_the_spec(profile_run):
    """Each setting at its default instead changes a number the profile's checks compare, beyond tolerance: the
    oracle takes the profile's value, not a constant."""
    view, spec, scores = profile_run
    assert hyperparameters.advantage_gaps(view, spec, scores) == {"gamma": True, "lam": True, "kl_coef": True}
    assert hyperparameters.objective_gaps(view, spec, scores) == {"kl_coef": True}
    tokens = hyperparameters.clip_tokens(view, spec, scores)
    assert tokens["cliprange"] > 0 and tokens["cliprange_value"] > 0, tokens
    assert hyperparameters.untold(view, spec, scores, tuple(PROFILE), objectives=False) == []


def test_a_run_where_nothing_tells_the_settings_fails(reference_cache, monkeypatch):
    monkeypatch.setattr(pooled, "clip_tokens", lambda *a: {"cliprange": 0, "cliprange_value": 0})
    monkeypatch.setattr(hyperparameters, "clip_tokens", lambda *a: {"cliprange": 0, "cliprange_value": 0})
    monkeypatch.setattr(hyperparameters, "advantage_gaps", lambda *a: dict.fromkeys(hyperparameters.RETURNS, False))
    monkeypatch.setattr(hyperparameters, "objective_gaps", lambda *a: {"kl_coef": False})
    for check_id in IDS:
        result = case(check_id).run(reference_cache, ScenarioSpec())
        assert not result.passed and "did not test what it should" in result.message, check_id
        assert "kl_coef at 0.05 instead of 0.1" in result.message


def test_settings_at_their_defaults_need_no_evidence(profile_run):
    view, spec, scores = profile_run
    at_defaults = spec.with_(**{name: getattr(ScenarioSpec(), name) for name in PROFILE})
    assert hyperparameters.untold(view, at_defaults, scores, tuple(PROFILE), objectives=False) == []
