"""The loss entries a GRPO target declares (definitions.py: kl_clamp, kl_importance_weighting, dual_clip_ratio):
the oracle's per-token KL, policy loss and gradient against an autograd of the loss written out here in float64."""

from __future__ import annotations

import math

import pytest
import torch

from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.oracle.expect import Settings, expected_metrics
from harness.algorithms.grpo.oracle.token_gradients import token_gradient
from harness.algorithms.grpo.spec import GRPOSpec
from tests.support.grpo_doubles import record

VERL = VOCABULARY.resolve("verl")
TRL = VOCABULARY.resolve("trl")
SPEC = GRPOSpec(loss_type="dapo", beta=0.04, gradient_accumulation_steps=1, steps_per_generation=1)
LOG_RATIOS = [[math.log(4.0), math.log(2.5), math.log(0.5), math.log(1.5), 0.1, -0.05],
              [math.log(3.5), 0.02, math.log(0.7), -0.3, math.log(5.0), 0.0]]  # fmt: skip
"""logp - old per token: ratios of 4 and 3.5 (above the dual clip's 3), 2.5, 5, and inside the clip range."""
GAPS = [[0.5, -0.5, 3.0, -12.0, 2.0, 0.01], [0.4, 2.6, -1.0, 0.2, -2.0, 3.5]]
"""ref - logp per token: k3 = exp(gap) - gap - 1 is 16.1, 11.0 and 26.6 (above the clamp 10) at 3, -12 and 3.5, and
9.9 (below it) at 2.6."""
ADVANTAGES = [-1.0, 0.5]


def made() -> object:
    logps = [[-1.0 - 0.1 * j for j in range(6)], [-0.5 - 0.2 * j for j in range(6)]]
    old = [[lp - lr for lp, lr in zip(a, b)] for a, b in zip(logps, LOG_RATIOS)]
    ref = [[lp + g for lp, g in zip(a, b)] for a, b in zip(logps, GAPS)]
    return record([[1] * 6, [1] * 6], logps, ADVANTAGES, old=old, ref=ref)


def written_out(r, beta: float, c: float | None, clamp: float | None, weighted: bool, eps: float = 0.2):
    """(l_t per token, d l_t / d logp_t by autograd): -min(r A, clip(r) A), min'd with -A c where A < 0 (dual
    clip), plus beta k3, k3 clamped at `clamp` and times r when `weighted`."""
    logps = r.logps.clone().requires_grad_(True)
    adv = r.advantages.unsqueeze(1)
    ratio = torch.exp(logps - r.old_logps)
    surrogate = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps))
    if c is not None:
        surrogate = torch.where(adv < 0, torch.minimum(surrogate, -adv * c), surrogate)
    gap = r.ref_logps - logps
    k3 = torch.exp(gap) - gap - 1
    if clamp is not None:
        k3 = torch.clamp(k3, -clamp, clamp)
    loss = surrogate + beta * (k3 * ratio if weighted else k3)
    (grad,) = torch.autograd.grad(loss.sum(), logps)
    return loss.detach(), grad


def test_the_trl_profile_is_the_settings_of_the_run_and_verl_declares_its_three_values():
    assert Settings.of(SPEC, TRL) == Settings.of(SPEC)
    s = Settings.of(SPEC, VERL)
    assert (s.kl_clamp, s.kl_importance_weighting, s.dual_clip_ratio) == (10.0, "never", 3.0)


DECLARED = ["trl", "verl", {"kl_clamp": 10.0}, {"kl_importance_weighting": "never"}, {"dual_clip_ratio": 3.0},
            {"profile": "verl", "dual_clip_ratio": 4.5}]  # fmt: skip


@pytest.mark.parametrize("declared", DECLARED)
def test_the_gradient_is_the_autograd_of_the_written_out_loss(declared):
    r = made()
    s = Settings.of(SPEC, VOCABULARY.resolve(declared))
    _, grad = written_out(r, SPEC.beta, s.dual_clip_ratio, s.kl_clamp, s.kl_importance_weighting == "as_configured")
    terms = token_gradient(r, s)
    assert not terms.uncertain.any()
    assert torch.allclose(terms.value, grad, rtol=1e-12, atol=1e-14)


def test_verls_values_change_the_gradient_where_the_clamp_and_the_dual_clip_hold():
    r = made()
    verl, trl = token_gradient(r, Settings.of(SPEC, VERL)), token_gradient(r, Settings.of(SPEC, TRL))
    held = verl.value != trl.value
    assert bool(held.all())  # the KL is unweighted at every token
    plain = Settings.of(SPEC, VOCABULARY.resolve({"kl_importance_weighting": "never"}))
    at_bounds = token_gradient(r, Settings.of(SPEC, VERL)).value != token_gradient(r, plain).value
    # the dual clip (A < 0: r = 4 is above 3, r = 2.5 is not; row 2's A > 0) and the clamp (k3 above 10)
    assert at_bounds.nonzero().tolist() == [[0, 0], [0, 2], [0, 3], [1, 5]]
    assert verl.dual.nonzero().tolist() == [[0, 0]] and trl.dual is None


def test_the_pooled_kl_and_policy_loss_are_those_of_the_written_out_loss():
    r = made()
    for declared in ("trl", "verl"):
        s = Settings.of(SPEC, VOCABULARY.resolve(declared))
        weighted = s.kl_importance_weighting == "as_configured"
        loss, _ = written_out(r, SPEC.beta, s.dual_clip_ratio, s.kl_clamp, weighted)
        without_kl, _ = written_out(r, 0.0, s.dual_clip_ratio, s.kl_clamp, weighted)
        got = expected_metrics([r], SPEC, VOCABULARY.resolve(declared))
        logged = loss if s.policy_loss_includes_kl else without_kl  # verl logs pg_loss, before the KL is added
        assert got["policy_loss"].value == pytest.approx(float(logged.mean()), rel=1e-12)  # dapo: the token mean
        assert got["kl"].value == pytest.approx(float((loss - without_kl).mean()) / SPEC.beta, rel=1e-9)
    clamped = expected_metrics([r], SPEC, VERL)["kl"].value
    gaps = torch.tensor(GAPS, dtype=torch.float64)
    assert clamped == pytest.approx(float((torch.exp(gaps) - gaps - 1).clamp(max=10).mean()), rel=1e-12)


def test_a_ratio_or_a_k3_within_rounding_of_a_declared_bound_is_not_compared():
    at_three = record([[1]], [[0.0]], [-1.0], old=[[-math.log(3.0) - 1e-9]], ref=[[0.0]])
    assert bool(token_gradient(at_three, Settings.of(SPEC, VERL)).uncertain.all())
    assert not token_gradient(at_three, Settings.of(SPEC, TRL)).uncertain.any()
    gap = 2.61086864  # k3 = exp(gap) - gap - 1 within 1e-8 of 10
    at_ten = record([[1]], [[0.0]], [1.0], old=[[0.0]], ref=[[gap]])
    assert abs(math.exp(gap) - gap - 1 - 10) < 1e-7
    assert bool(token_gradient(at_ten, Settings.of(SPEC, VERL)).uncertain.all())
    assert not token_gradient(at_ten, Settings.of(SPEC, TRL)).uncertain.any()


@pytest.mark.parametrize(("declared", "said"), [
    ({"dual_clip_ratio": 1.0}, "None or a finite number above 1"), ({"kl_clamp": 0}, "None or a finite number above 0"),
    ({"kl_clamp": "10"}, "None or a finite number above 0"),
    ({"kl_importance_weighting": "always"}, "'as_configured', 'never'"),
])  # fmt: skip
def test_a_loss_entry_that_cannot_be_read_is_one_configuration_error(declared, said):
    from harness.errors import HarnessConfigError

    with pytest.raises(HarnessConfigError, match=said):
        VOCABULARY.resolve(declared)
