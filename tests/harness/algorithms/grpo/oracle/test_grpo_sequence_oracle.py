"""The GRPO oracle at importance_sampling_level 'sequence' (GSPO): the gradient at the log-probs against autograd of
the loss written out here from its definition, and the clip flags one per completion, pooled over completions."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from harness.algorithms.grpo.oracle import gradients
from harness.algorithms.grpo.oracle.expect import Settings, expected_metrics, token_terms
from harness.algorithms.grpo.spec import GRPOSpec
from tests.support.grpo_doubles import record

MASK = [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
"""Completions of 3, 1, 4 and no tokens."""
ADVANTAGES = [1.0, -0.5, -1.5, 0.7]


def draw(seed: int, spread: float):
    """New, old and reference log-probs of the four rows: the new ones `spread` off the old ones."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 4, generator=g, dtype=torch.float64) * 2 - 0.1
    new = old + (torch.rand(4, 4, generator=g, dtype=torch.float64) - 0.5) * spread
    ref = old + (torch.rand(4, 4, generator=g, dtype=torch.float64) - 0.5) * 0.4
    return new, old, ref


def window_loss(new, old, ref, spec: GRPOSpec) -> torch.Tensor:
    """The grpo loss of one window of these rows, from its definition: s_i = exp(mean of the row's log-ratios over
    its mask), l_t = -min(s A, clip(s) A) + beta k3_t (times s when corrected) on every token of row i, each row's
    mean over its mask, then the mean over the rows."""
    mask = torch.tensor(MASK, dtype=torch.float64)
    adv = torch.tensor(ADVANTAGES, dtype=torch.float64).unsqueeze(1)
    mean = ((new - old) * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)
    s = torch.exp(mean)
    policy = -torch.min(s * adv, s.clamp(1 - spec.epsilon_low, 1 + spec.epsilon_high) * adv)
    k3 = torch.exp(ref - new) - (ref - new) - 1
    if spec.use_bias_correction_kl:
        k3 = k3 * s
    per_token = policy + spec.beta * k3
    rows = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return rows.mean()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("beta", "corrected"), [(0.0, True), (0.3, True), (0.3, False)])
def test_the_sequence_level_gradient_is_autograds_of_the_loss(seed, beta, corrected):
    spec = GRPOSpec(loss_type="grpo", beta=beta, use_bias_correction_kl=corrected, importance_sampling_level="sequence",
                    gradient_accumulation_steps=1, steps_per_generation=1)  # fmt: skip
    new, old, ref = draw(seed, spread=0.8)
    leaf = new.clone().requires_grad_(True)
    window_loss(leaf, old, ref, spec).backward()
    r = dataclasses.replace(record(MASK, new.tolist(), ADVANTAGES, old=old.tolist(), ref=ref.tolist()),
                            logp_grad=leaf.grad.clone())  # fmt: skip
    gap = gradients.gaps([r], gradients.WindowWeights.of(spec))
    assert gap.compared == 8 and gap.largest < 1e-12, gap
    # at token level the same recorded gradient is another function's: the formula must not pass it
    token = gradients.gaps([r], gradients.WindowWeights.of(spec.with_(importance_sampling_level="token")))
    assert token.largest > 1e-3


def test_a_clipped_completion_is_clipped_whole_and_its_policy_term_has_no_gradient():
    """Row 0 (A > 0) with a mean log-ratio of log 1.5 is clipped on every token, whatever its tokens' own ratios;
    at beta 0 its gradient is 0 everywhere; row 1 (A < 0) is not clipped and each of its tokens shares -A s / n."""
    old = [[0.0] * 3, [0.0] * 3]
    up = torch.log(torch.tensor(1.5, dtype=torch.float64)).item()
    new = [[3 * up, 0.0, 0.0], [up, -up, 0.0]]  # row 0: mean log 1.5; row 1: mean 0 over its two tokens
    r = record([[1, 1, 1], [1, 1, 0]], new, [1.0, -1.0], old=old)
    s = Settings.of(GRPOSpec(beta=0.0, loss_type="grpo", importance_sampling_level="sequence"))
    terms = gradients.token_gradient(r, s)
    assert terms.clipped.tolist() == [[True, True, True], [False, False, False]]
    assert terms.shared[0].tolist() == [0.0, 0.0, 0.0] and terms.shared[1, :2].tolist() == [1.0, 1.0]
    flags = token_terms(r, s)
    assert flags.high[:, 0].tolist() == [1.0, 0.0] and flags.low[:, 0].tolist() == [0.0, 0.0]


def test_the_clip_means_pool_over_completions_and_the_extremes_take_a_flag_per_completion():
    """Two micro-batches: the first's long completion (3 tokens) clipped, its short one not; the second's one
    completion clipped, beside an empty row. Over completions 2 of 4 (the empty row counts); over tokens 4 of 5."""
    up = torch.log(torch.tensor(1.5, dtype=torch.float64)).item()
    first = record([[1, 1, 1], [1, 0, 0]], [[up] * 3, [0.0] * 3], [1.0, 1.0], old=[[0.0] * 3] * 2)
    second = record([[1, 0, 0], [0, 0, 0]], [[up] * 3, [up] * 3], [1.0, 1.0], old=[[0.0] * 3] * 2, window=1)
    spec = GRPOSpec(beta=0.0, loss_type="grpo", importance_sampling_level="sequence", max_steps=2, logging_steps=2)
    got = expected_metrics([first, second], spec)
    assert got["clip_ratio/high_mean"].value == pytest.approx(2 / 4)  # the empty row counts, unclipped (ratio 1)
    assert got["clip_ratio/region_mean"].value == pytest.approx(2 / 4)
    assert got["clip_ratio/high_max"].value == 1.0 and got["clip_ratio/low_min"].value == 0.0
    token = expected_metrics([first, second], spec.with_(importance_sampling_level="token"))
    assert token["clip_ratio/high_mean"].value == pytest.approx(4 / 5)


def test_settings_of_a_spec_without_the_level_read_token_level():
    """A spec object that predates the setting (a target's own) is read at token level, TRL's default."""
    older = types.SimpleNamespace(**{f.name: getattr(GRPOSpec(), f.name) for f in dataclasses.fields(Settings)
                                     if f.default is dataclasses.MISSING})  # the settings every spec had
    assert not hasattr(older, "importance_sampling_level")
    assert Settings.of(older).importance_sampling_level == "token"
    assert not Settings.of(older).sequence_level
