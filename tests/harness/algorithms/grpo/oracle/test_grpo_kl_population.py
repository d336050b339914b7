"""kl_population (definitions.py): how the logged kl weighs its tokens, a token mean whatever the loss type (trl:
_compute_loss logs global_masked_mean(per_token_kl)) or the loss type's own aggregate (verl: ppo_loss logs agg_loss of
k3 with the loss's loss_agg_mode). The oracle's pooled kl against both written out here in float64, on completions of
3, 1 and 0 tokens (an empty one counts in a completion mean, as the loss's does)."""

from __future__ import annotations

import pytest
import torch

from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.oracle.expect import expected_metrics
from harness.algorithms.grpo.spec import GRPOSpec
from tests.support.grpo_doubles import record

BETA = 0.04
AS_LOSS = VOCABULARY.resolve({"kl_population": "as_loss"})
TRL = VOCABULARY.resolve("trl")
LENGTH = 4


def made():
    mask = [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
    logps = [[-1.0, -0.5, -2.0, -1.0], [-0.3, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0]]
    ref = [[-0.8, -0.9, -1.0, -1.0], [-1.3, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0]]
    return record(mask, logps, [1.0, -0.5, 0.0], ref=ref)


def k3(r) -> torch.Tensor:
    gap = r.ref_logps - r.logps
    return (torch.exp(gap) - gap - 1) * r.completion_mask


@pytest.mark.parametrize("loss_type", ["grpo", "sapo", "dr_grpo", "luspo", "dapo", "cispo", "bnpo"])
def test_the_kl_is_a_token_mean_or_the_loss_types_aggregate_as_declared(loss_type):
    r = made()
    kl, tokens = k3(r), r.completion_mask.sum(1).double()
    token_mean = float(kl.sum() / tokens.sum())
    as_loss = {"grpo": float((kl.sum(1) / tokens.clamp(min=1)).mean()),
               "dr_grpo": float(kl.sum() / (3 * LENGTH)), "luspo": float(kl.sum() / 3)}  # fmt: skip
    as_loss["sapo"] = as_loss["grpo"]
    spec = GRPOSpec(loss_type=loss_type, beta=BETA, max_completion_length=LENGTH)
    assert expected_metrics([r], spec, TRL)["kl"].value == pytest.approx(token_mean, rel=1e-12)
    declared = expected_metrics([r], spec, AS_LOSS)["kl"].value
    assert declared == pytest.approx(as_loss.get(loss_type, token_mean), rel=1e-12)
    if loss_type in as_loss:
        assert abs(declared - token_mean) > 1e-3  # the two weigh the tokens differently here


def test_the_policy_loss_does_not_read_it():
    spec = GRPOSpec(loss_type="grpo", beta=BETA, max_completion_length=LENGTH)
    trl, declared = expected_metrics([made()], spec, TRL), expected_metrics([made()], spec, AS_LOSS)
    assert [n for n in trl if trl[n].value != declared[n].value] == ["kl"]
