"""The GRPO oracle of the entropy bonus (`entropy_coef`): the gradient at each token's entropy against autograd of
the bonus written out here from its definition (the window's mean entropy over its tokens), TRL's per-micro-batch
form named as class 82, a record without the gradient not recomputable, and the bonus's tokens under the entropy
mask those the mask keeps."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms.grpo.oracle import entropy_bonus
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.wrong import entropy_bonus as wrong
from harness.errors import HarnessConfigError, NotRecomputable
from reference_trainers.grpo_config import GRPOConfig
from reference_trainers.ppo_config import ConfigError
from tests.support.grpo_doubles import record

COEF = 0.01
MASKS = ([[1, 1, 1, 0], [1, 0, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
"""One window of two micro-batches of 4 and 6 tokens: their means differ from the window's."""


def entropies_of(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(2, 4, generator=g, dtype=torch.float64) * 3 for _ in MASKS]


def records_with(grads: list[torch.Tensor], masks=MASKS, entropies=None) -> list:
    entropies = entropies or entropies_of(0)
    out = []
    for mask, grad, h in zip(masks, grads, entropies):
        base = record(mask, torch.zeros(2, 4).tolist(), [1.0, -1.0], entropies=h.tolist())
        out.append(dataclasses.replace(base, entropy_grad=grad))
    return out


def autograd_grads(per_micro_batch: bool, masks=MASKS) -> list[torch.Tensor]:
    """dL/dH of each micro-batch of L = -coef * H, H the window's token mean (or TRL's: each micro-batch's own mean
    over the window's micro-batches)."""
    hs = [h.clone().requires_grad_(True) for h in entropies_of(0)]
    ms = [torch.tensor(m, dtype=torch.float64) for m in masks]
    if per_micro_batch:
        bonus = sum((h * m).sum() / m.sum() / len(ms) for h, m in zip(hs, ms))
    else:
        bonus = sum((h * m).sum() for h, m in zip(hs, ms)) / sum(m.sum() for m in ms)
    (-COEF * bonus).backward()
    return [h.grad for h in hs]


def test_the_window_means_gradient_is_the_formula():
    gap = entropy_bonus.gaps(records_with(autograd_grads(per_micro_batch=False)), COEF)
    assert gap.largest < 1e-12 and gap.compared == 10 and gap.uneven == 1


def test_trls_per_micro_batch_mean_fails_and_is_named_class_82():
    gap = entropy_bonus.gaps(records_with(autograd_grads(per_micro_batch=True)), COEF)
    assert gap.largest > 0.1
    diagnosis, why = wrong.diagnose(gap, "float32")
    assert why == "" and diagnosis.classes == (wrong.MICRO_BATCH_MEAN,)


def test_a_common_factor_is_not_named_class_82():
    gap = entropy_bonus.gaps(records_with([2 * g for g in autograd_grads(per_micro_batch=False)]), COEF)
    diagnosis, why = wrong.diagnose(gap, "float32")
    assert gap.largest > 0.1 and diagnosis is None and why


OTHER_RANK = ([[1, 0, 0, 0], [1, 1, 0, 0]], [[1, 1, 1, 0], [0, 0, 0, 0]])
"""The window's two micro-batches on rank 1: 3 and 3 tokens, against rank 0's 4 and 6 (MASKS)."""


def on_two_ranks(count) -> list:
    """MASKS on rank 0 and OTHER_RANK on rank 1, one window, each micro-batch's dL/dH -coef * 2 * mask / count(rank)
    (a rank's backward pass, its loss times the number of ranks)."""
    out = []
    for rank, masks in enumerate((MASKS, OTHER_RANK)):
        tokens = count(rank)
        grads = [-COEF * 2 * torch.tensor(m, dtype=torch.float64) / tokens for m in masks]
        out += [dataclasses.replace(r, rank=rank) for r in records_with(grads, masks)]
    return out


def test_across_ranks_the_count_is_every_ranks_and_one_kept_on_the_rank_is_named_class_95():
    tokens = [sum(sum(row) for m in masks for row in m) for masks in (MASKS, OTHER_RANK)]
    assert tokens == [10, 6]
    right = entropy_bonus.gaps(on_two_ranks(lambda rank: sum(tokens)), COEF, world=2)
    assert right.largest < 1e-12 and right.compared == 16
    own = entropy_bonus.gaps(on_two_ranks(lambda rank: tokens[rank]), COEF, world=2)
    assert own.largest > 0.1
    diagnosis, why = wrong.diagnose(own, "float32")
    assert why == "" and diagnosis.classes == (wrong.RANK_COUNT,)
    equal = entropy_bonus.gaps(on_two_ranks(lambda rank: 8), COEF, world=2)  # even a count of half of every rank's
    assert equal.largest > 0.1 and wrong.diagnose(equal, "float32")[0] is None


def test_micro_batches_of_equal_token_counts_are_not_uneven():
    masks = ([[1, 1, 0, 0], [1, 1, 1, 0]], [[1, 1, 1, 1], [1, 0, 0, 0]])
    gap = entropy_bonus.gaps(records_with(autograd_grads(False, masks), masks), COEF)
    assert gap.uneven == 0 and gap.largest < 1e-12


def test_a_record_without_the_gradient_at_the_entropies_is_not_recomputable():
    records = records_with(autograd_grads(per_micro_batch=False))
    records[1] = dataclasses.replace(records[1], entropy_grad=None)
    with pytest.raises(NotRecomputable, match="no gradient at the entropies"):
        entropy_bonus.gaps(records, COEF)


def test_under_the_entropy_mask_the_bonus_acts_on_the_kept_tokens():
    hs = entropies_of(0)
    ms = [torch.tensor(m, dtype=torch.bool) for m in MASKS]
    kept = []
    for h, m in zip(hs, ms):  # each micro-batch's own threshold (one rank)
        kept.append((h >= torch.quantile(h[m], 1 - 0.5)) & m)
    tokens = sum(float(k.sum()) for k in kept)
    grads = [-COEF * k.double() / tokens for k in kept]
    gap = entropy_bonus.gaps(records_with(grads), COEF, quantile=0.5)
    assert gap.largest < 1e-12
    unmasked = [-COEF * m.double() / sum(float(x.sum()) for x in ms) for m in ms]
    assert entropy_bonus.gaps(records_with(unmasked), COEF, quantile=0.5).largest > 0.1


def test_entropy_coef_must_be_finite_and_not_negative():
    for bad in (-0.01, float("inf"), float("nan")):
        with pytest.raises(HarnessConfigError, match="entropy_coef"):
            GRPOSpec(entropy_coef=bad).validate()
        with pytest.raises(ConfigError, match="entropy_coef"):
            GRPOConfig(entropy_coef=bad)
    GRPOSpec(entropy_coef=0.01).validate()
