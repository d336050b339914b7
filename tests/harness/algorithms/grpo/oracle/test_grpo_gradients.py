"""GRPO logp_gradient: the formula on hand-made records, and the check failing loudly on what it did not see."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle import gradients
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import NotRecomputable
from harness.instrument.observe import Observation
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, ran, record


def formula(records, spec, world=1):
    """The expected recorded gradient of each record (B, T), float64."""
    g = gradients.WindowWeights.of(spec, world=world)
    weights = gradients.window_weights(records, g, gradients.generation_tokens(records, g))
    return [w * gradients.token_gradient(r, g.settings).value for r, w in zip(records, weights)]


MASK = [[1, 1, 0], [1, 0, 0]]
"""Two completions of 2 and 1 tokens: 3 tokens in the window."""


@pytest.mark.parametrize(
    ("loss_type", "row0", "row1"),
    [
        ("bnpo", -1 / 3, 2 / 3),  # -A / window tokens
        ("grpo", -1 / (2 * 2), 2 / (1 * 2)),  # -A / (completion tokens * completions)
        ("dr_grpo", -1 / (2 * 12), 2 / (2 * 12)),  # -A / (completions * max_completion_length)
        ("dapo", -1 / 3, 2 / 3),  # -A / (generation tokens * the window's share, here all of it)
    ],
)
def test_each_loss_type_weighs_the_per_token_gradient_as_section_4_says(loss_type, row0, row1):
    r = record(MASK, [[0.0] * 3] * 2, [1.0, -2.0])  # on-policy: r = 1, gradient -A
    spec = GRPOSpec(loss_type=loss_type, beta=0.0, gradient_accumulation_steps=1, steps_per_generation=1)
    (got,) = formula([r], spec)
    assert torch.allclose(got, torch.tensor([[row0, row0, 0.0], [row1, 0.0, 0.0]], dtype=torch.float64))
    # two ranks with the same rows: twice the counts, and each rank's loss multiplied by the ranks
    for each in formula([r, dataclasses.replace(r, rank=1)], spec, world=2):
        assert torch.allclose(each, got)


def test_dapo_takes_the_generation_batch_and_the_windows_share_of_it():
    """Two windows of one micro-batch each over a generation of two: each window's loss is over half the
    generation's tokens (3 + 1 = 4 tokens, share 1/2), whatever its own count."""
    one = record([[1, 1, 1]], [[0.0] * 3], [1.0], window=0)
    two = record([[1, 0, 0]], [[0.0] * 3], [1.0], window=1)
    spec = GRPOSpec(loss_type="dapo", beta=0.0, gradient_accumulation_steps=1, steps_per_generation=2)
    g = gradients.WindowWeights.of(spec)
    generations = gradients.generation_tokens([one, two], g)
    assert generations == {0: 4.0}
    for r in (one, two):
        (w,) = gradients.window_weights([r], g, generations)
        assert float(w[0, 0]) == pytest.approx(1 / (4 * 0.5))
    with pytest.raises(NotRecomputable, match="did not run in full"):
        gradients.window_weights([one], g, gradients.generation_tokens([one], g))


def test_the_clip_zeroes_the_gradient_only_where_the_clipped_branch_is_the_smaller():
    up = math.log(1.5)  # r = 1.5, above 1 + 0.2
    r = record([[1, 1]], [[up, up]], [1.0], old=[[0.0, 0.0]])
    terms = gradients.token_gradient(r, gradients.Settings.of(GRPOSpec(beta=0.0)))
    assert terms.value.tolist() == [[0.0, 0.0]] and int(terms.clipped.sum()) == 2  # A > 0: clipped, flat
    r = record([[1, 1]], [[up, up]], [-1.0], old=[[0.0, 0.0]])
    terms = gradients.token_gradient(r, gradients.Settings.of(GRPOSpec(beta=0.0)))
    assert terms.value.tolist() == [pytest.approx([1.5, 1.5])] and int(terms.clipped.sum()) == 0  # -A r
    near = record([[1]], [[math.log(1.2 + 1e-9)]], [1.0], old=[[0.0]])
    assert bool(gradients.token_gradient(near, gradients.Settings.of(GRPOSpec(beta=0.0))).uncertain.all())


def test_the_kl_term_with_and_without_the_bias_correction():
    gap, log_r = 0.3, 0.1  # ref - logp, logp - old
    r = record([[1]], [[0.0]], [0.0], old=[[-log_r]], ref=[[gap]])
    k3, ratio = math.exp(gap) - gap - 1, math.exp(log_r)
    spec = GRPOSpec(beta=0.5)
    corrected = gradients.token_gradient(r, gradients.Settings.of(spec)).value
    assert float(corrected) == pytest.approx(0.5 * ((1 - math.exp(gap)) * ratio + k3 * ratio))
    plain = gradients.token_gradient(r, gradients.Settings.of(spec.with_(use_bias_correction_kl=False))).value
    assert float(plain) == pytest.approx(0.5 * (1 - math.exp(gap)))
    r = dataclasses.replace(r, ref_logps=None)
    with pytest.raises(NotRecomputable, match="no reference log-probs"):
        gradients.token_gradient(r, gradients.Settings.of(spec))


@pytest.fixture(scope="module")
def reference_cache():
    return reference("grpo")


def check(check_id, cache):
    return case(check_id, "grpo").run(cache, GRPOSpec())


def test_the_reference_records_the_gradient_and_passes(reference_cache):
    result = check("logp_gradient[loss_type=bnpo]", reference_cache)
    assert result.passed, result.message
    spec = gradient_scenarios.run_spec(GRPOSpec(), case("logp_gradient[loss_type=bnpo]", "grpo"))
    obs = reference_cache.get(spec, spy=False)
    assert all(r.logp_grad.dtype == torch.float64 for r in recorded(obs.ran).loss_inputs)


def _with(obs, change):
    records = [change(r) for r in recorded(obs.ran).loss_inputs]
    return FixedCache(lambda spec: Observation(obs.spec, ran(obs.ran.logs, records, obs.ran.grads.steps)))


def test_no_gradient_a_common_factor_or_a_nan_fails_and_says_so(reference_cache):
    spec = gradient_scenarios.run_spec(GRPOSpec(), case("logp_gradient[loss_type=bnpo]", "grpo"))
    obs = reference_cache.get(spec, spy=False)
    missing = check("logp_gradient[loss_type=bnpo]", _with(obs, lambda r: dataclasses.replace(r, logp_grad=None)))
    assert not missing.passed and "no gradient reached the log-probs" in missing.message
    doubled = check("logp_gradient[loss_type=bnpo]",
                    _with(obs, lambda r: dataclasses.replace(r, logp_grad=2 * r.logp_grad)))  # fmt: skip
    assert not doubled.passed and "2 times the formula's in every micro-batch (a common factor)" in doubled.message

    def nan(r):
        grad = r.logp_grad.clone()
        grad[0, 0] = math.nan
        return dataclasses.replace(r, logp_grad=grad)

    assert not check("logp_gradient[loss_type=bnpo]", _with(obs, nan)).passed


def test_a_run_without_a_clipped_token_fails_the_clipped_cases(reference_cache):
    """The clipped runs exist to show the clip's flat branch: records whose ratios are all 1 fail them."""
    spec = gradient_scenarios.run_spec(GRPOSpec(), case("logp_gradient[run=extremes]", "grpo"))
    obs = reference_cache.get(spec, spy=False)
    result = check("logp_gradient[run=extremes]", _with(obs, lambda r: dataclasses.replace(r, old_logps=r.logps)))
    assert not result.passed and "no token's gradient was zeroed by the clip" in result.message


def test_a_run_whose_every_advantage_is_0_at_beta_0_passes_only_with_a_zero_gradient():
    """Under `--set beta=0` a run may have every advantage 0 (all groups alike): the formula is 0 everywhere, and
    the recorded gradient must be too; a non-zero one, or beta != 0, fails."""
    spec = GRPOSpec(beta=0.0)
    kase = case("logp_gradient[loss_type=bnpo]", "grpo")
    obs = reference("grpo").get(gradient_scenarios.run_spec(spec, kase), spy=False)

    def still(r, grad=0.0):
        zero = torch.zeros_like(r.advantages)
        return dataclasses.replace(r, advantages=zero, logp_grad=torch.full_like(r.logp_grad, grad))

    flat = kase.run(_with(obs, still), spec)
    assert flat.passed and "the loss's normalisation is not seen" in " ".join(flat.notes)
    moved = kase.run(_with(obs, lambda r: still(r, 1e-3)), spec)
    assert not moved.passed and "the recorded one reaches 0.001" in moved.message
