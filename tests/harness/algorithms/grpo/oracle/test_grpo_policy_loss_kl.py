"""policy_loss_includes_kl (definitions.py): whether the logged policy_loss holds the loss's KL term, beta kl (trl) or
not (verl: ppo_loss logs pg_loss before it adds the KL). The oracle's pooled policy_loss against the loss written
out here in float64; the KL it logs and the gradient do not read the entry."""

from __future__ import annotations

import math

import pytest
import torch

from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.oracle.expect import Settings, expected_metrics
from harness.algorithms.grpo.oracle.token_gradients import token_gradient
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from tests.support.grpo_doubles import record

BETA = 0.04
EXCLUDED = VOCABULARY.resolve({"policy_loss_includes_kl": False})
TRL = VOCABULARY.resolve("trl")


def made():
    """Two completions of 3 and 2 tokens, ratios off 1 (one clipped), k3 from 0.005 to 1.4."""
    mask = [[1, 1, 1], [1, 1, 0]]
    logps = [[-1.0, -0.7, -1.5], [-0.4, -2.0, -1.0]]
    old = [[lp - lr for lp, lr in zip(a, b)] for a, b in zip(logps, [[0.1, math.log(1.5), -0.05], [0.2, -0.1, 0]])]
    ref = [[lp + g for lp, g in zip(a, b)] for a, b in zip(logps, [[0.1, -1.0, 1.5], [0.3, -0.2, 0]])]
    return record(mask, logps, [1.0, -0.5], old=old, ref=ref)


def written_out(r) -> tuple[torch.Tensor, torch.Tensor]:
    """(-min(r A, clip(r) A), k3 r) per token, float64: the policy term and the bias-corrected KL."""
    adv = r.advantages.unsqueeze(1)
    ratio = torch.exp(r.logps - r.old_logps)
    policy = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2))
    gap = r.ref_logps - r.logps
    return policy, (torch.exp(gap) - gap - 1) * ratio


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_the_pooled_policy_loss_holds_beta_kl_only_where_the_target_declares_it(loss_type):
    r = made()
    spec = GRPOSpec(loss_type=loss_type, beta=BETA, gradient_accumulation_steps=1, steps_per_generation=1)
    policy, kl = written_out(r)
    mask = r.completion_mask.double()

    def pooled(per_token):  # dapo: the token mean; grpo: the mean of each completion's token mean
        if loss_type == "dapo":
            return float((per_token * mask).sum() / mask.sum())
        return float(((per_token * mask).sum(1) / mask.sum(1)).mean())

    included, excluded = expected_metrics([r], spec, TRL), expected_metrics([r], spec, EXCLUDED)
    assert included["policy_loss"].value == pytest.approx(pooled(policy + BETA * kl), rel=1e-12)
    assert excluded["policy_loss"].value == pytest.approx(pooled(policy), rel=1e-12)
    assert abs(pooled(BETA * kl)) > 1e-3  # the KL term is seen
    assert excluded["kl"].value == included["kl"].value == pytest.approx(float((kl * mask).sum() / mask.sum()))


def test_the_gradient_and_the_default_do_not_read_it():
    spec = GRPOSpec(loss_type="dapo", beta=BETA)
    assert Settings.of(spec).policy_loss_includes_kl and Settings.of(spec, TRL) == Settings.of(spec)
    assert not Settings.of(spec, VOCABULARY.resolve("verl")).policy_loss_includes_kl
    r = made()
    assert torch.equal(token_gradient(r, Settings.of(spec, EXCLUDED)).value, token_gradient(r, Settings.of(spec)).value)


@pytest.mark.parametrize("value", [1, 0, "False", None])
def test_it_takes_true_or_false_alone(value):
    with pytest.raises(HarnessConfigError, match="policy_loss_includes_kl' takes True or False"):
        VOCABULARY.resolve({"policy_loss_includes_kl": value})
