"""The GRPO oracle under TRL's entropy mask (`top_entropy_quantile`): the gradient at the log-probs against autograd
of the loss written out here from its definition, the threshold over every rank's k-th micro-batch of a step, the
tokens within rounding of it left uncompared, and the pooled policy_loss with the policy term masked, the KL not."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms.grpo.oracle import entropy_mask, gradients
from harness.algorithms.grpo.oracle.expect import Settings, expected_metrics, token_terms
from harness.algorithms.grpo.spec import GRPOSpec
from tests.support.grpo_doubles import record

MASK = [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
"""Completions of 3, 1, 4 and no tokens."""
ADVANTAGES = [1.0, -0.5, -1.5, 0.7]


def draw(seed: int):
    """New, old and reference log-probs and entropies of the four rows."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 4, generator=g, dtype=torch.float64) * 2 - 0.1
    new = old + (torch.rand(4, 4, generator=g, dtype=torch.float64) - 0.5) * 0.8
    ref = old + (torch.rand(4, 4, generator=g, dtype=torch.float64) - 0.5) * 0.4
    entropies = torch.rand(4, 4, generator=g, dtype=torch.float64) * 3
    return new, old, ref, entropies


def window_loss(new, old, ref, entropies, spec: GRPOSpec) -> torch.Tensor:
    """The grpo loss of one window of these rows, from its definition: the policy term -min(r A, clip(r) A) kept
    where the entropy is at or above the (1 - q) quantile of the masked entropies, the KL term beta k3 r on every
    token; each row's mean over its mask, then the mean over the rows."""
    mask = torch.tensor(MASK, dtype=torch.bool)
    adv = torch.tensor(ADVANTAGES, dtype=torch.float64).unsqueeze(1)
    keep = (entropies >= torch.quantile(entropies[mask], 1 - spec.top_entropy_quantile)) & mask
    r = torch.exp(new - old)
    policy = -torch.min(r * adv, r.clamp(1 - spec.epsilon_low, 1 + spec.epsilon_high) * adv) * keep
    per_token = policy + spec.beta * (torch.exp(ref - new) - (ref - new) - 1) * r
    rows = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return rows.mean()


def spec_of(quantile: float, beta: float = 0.3) -> GRPOSpec:
    return GRPOSpec(loss_type="grpo", beta=beta, top_entropy_quantile=quantile, gradient_accumulation_steps=1,
                    steps_per_generation=1)  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("quantile", [0.2, 0.5, 0.0])
def test_the_masked_gradient_is_autograds_of_the_loss(seed, quantile):
    spec = spec_of(quantile)
    new, old, ref, entropies = draw(seed)
    leaf = new.clone().requires_grad_(True)
    window_loss(leaf, old, ref, entropies, spec).backward()
    r = dataclasses.replace(record(MASK, new.tolist(), ADVANTAGES, old=old.tolist(), ref=ref.tolist(),
                                   entropies=entropies.tolist()), logp_grad=leaf.grad.clone())  # fmt: skip
    gap = gradients.gaps([r], gradients.WindowWeights.of(spec))
    # a token exactly at the threshold (q 0 takes the largest entropy) lies within its rounding: not compared
    assert gap.compared == (7 if quantile == 0 else 8) and gap.largest < 1e-12, gap
    # the same gradient is not that of the loss without the mask, nor with the KL term masked too
    unmasked = gradients.gaps([r], gradients.WindowWeights.of(spec.with_(top_entropy_quantile=1.0)))
    assert unmasked.largest > 1e-3


def test_the_threshold_is_over_every_ranks_kth_micro_batch_of_a_step():
    """Two ranks' first micro-batches of window 0 are one micro-batch (TRL gathers the entropies across processes);
    their second ones another; window 1's first a third."""
    low = record([[1, 1]], [[-1.0, -1.0]], [1.0], entropies=[[0.1, 0.2]])
    high = dataclasses.replace(record([[1, 1]], [[-1.0, -1.0]], [1.0], entropies=[[2.0, 3.0]]), rank=1)
    later = record([[1, 1]], [[-1.0, -1.0]], [1.0], entropies=[[0.1, 0.2]], window=1)
    assert entropy_mask.steps([low, high, low, high, later]) == [(0, 0), (0, 0), (0, 1), (0, 1), (1, 0)]
    masks = entropy_mask.entropy_masks([low, high, later], 0.5)
    cut = float(torch.quantile(torch.tensor([0.1, 0.2, 2.0, 3.0], dtype=torch.float64), 0.5))
    assert masks[0].threshold == masks[1].threshold == cut
    assert masks[0].kept.tolist() == [[False, False]] and masks[1].kept.tolist() == [[True, True]]
    assert masks[2].kept.tolist() == [[False, True]]  # alone, its own median
    assert entropy_mask.entropy_masks([low, high], 1.0) == [None, None]


def test_a_micro_batch_without_a_token_keeps_none_and_one_without_entropies_is_not_recomputable():
    empty = record([[0, 0]], [[-1.0, -1.0]], [1.0], entropies=[[5.0, 5.0]])
    (mask,) = entropy_mask.entropy_masks([empty], 0.2)
    assert mask.threshold is None and not mask.kept.any()
    bare = dataclasses.replace(record([[1, 1]], [[-1.0, -1.0]], [1.0]), entropies=None)
    with pytest.raises(Exception, match="no per-token entropies"):
        entropy_mask.entropy_masks([bare], 0.2)


def test_a_token_within_rounding_of_the_threshold_is_uncertain_and_widens_policy_loss():
    """Entropies 1, 2 + 1e-7, 2, 3 at q 0.5: the threshold 2 + 5e-8 lies within float32's rounding of the two middle
    ones, which are not compared; policy_loss allows their policy terms pooled (its floor)."""
    r = record([[1, 1, 1, 1]], [[-1.0, -1.2, -0.9, -1.1]], [1.0], old=[[-1.1, -1.1, -1.0, -1.0]],
               entropies=[[1.0, 2.0 + 1e-7, 2.0, 3.0]])  # fmt: skip
    s = Settings.of(spec_of(0.5, beta=0.0).with_(loss_type="dapo"))
    (mask,) = entropy_mask.entropy_masks([r], 0.5)
    assert mask.uncertain.tolist() == [[False, True, True, False]]
    assert mask.kept.tolist() == [[False, True, False, True]]
    assert gradients.token_gradient(r, s).uncertain.tolist() == [[False, True, True, False]]
    terms = token_terms(r, s)
    assert terms.loss[0, 0] == 0 and terms.loss[0, 3] != 0 and terms.flips[0, 0] == 0 and terms.flips[0, 1] > 0
    spec = spec_of(0.5, beta=0.0).with_(loss_type="dapo", max_steps=1)
    loss = expected_metrics([r], spec)["policy_loss"]
    assert loss.precision.floor == pytest.approx(float(terms.flips.sum()) / 4)


def test_policy_loss_masks_the_policy_term_and_keeps_the_kl():
    """dapo at beta 0.5: each token's l_t is its policy term where the mask keeps it, plus 0.5 k3 r everywhere."""
    new, old, ref, entropies = draw(0)
    r = record(MASK, new.tolist(), ADVANTAGES, old=old.tolist(), ref=ref.tolist(), entropies=entropies.tolist())
    masked = token_terms(r, Settings.of(spec_of(0.2, beta=0.5).with_(loss_type="dapo")))
    whole = token_terms(r, Settings.of(spec_of(1.0, beta=0.5).with_(loss_type="dapo")))
    (mask,) = entropy_mask.entropy_masks([r], 0.2)
    kl = 0.5 * whole.kl
    assert torch.allclose(masked.loss, (whole.loss - kl) * mask.kept + kl, rtol=0, atol=1e-15)
    assert torch.equal(masked.kl, whole.kl) and torch.equal(masked.entropy, whole.entropy)
