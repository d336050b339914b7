"""token_mean_scope (definitions.py): the tokens dapo, cispo and vespo divide an optimizer step's summed loss by, the
generation batch's times the window's share (trl) or the window's own on every rank (verl). The oracle's window
weights against an autograd of the window loss written out here in float64, on windows whose token counts differ."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from harness.algorithms.grpo.definitions import TOKEN_MEAN_LOSS_TYPES, VOCABULARY
from harness.algorithms.grpo.oracle import gradients
from harness.algorithms.grpo.spec import LOSS_TYPES, GRPOSpec
from harness.errors import HarnessConfigError
from tests.support.grpo_doubles import record

WINDOW = VOCABULARY.resolve({"token_mean_scope": "window"})
TOKENS = (5, 4, 2, 1)
"""Tokens of the four micro-batches of one generation: windows of 9 and 3 tokens, 12 in the generation."""


def micro_batch(i: int, tokens: int, window: int, rank: int = 0):
    """A micro-batch of two completions over 3 positions holding `tokens` tokens, ratios off 1 (some clipped,
    one of A < 0 above the dual clip's 3) and k3 above the KL clamp's 10 at one token."""
    flat = [1] * tokens + [0] * (6 - tokens)
    mask = [flat[:3], flat[3:]]
    logps = [[-1.0 - 0.1 * (i + k), -0.6 - 0.05 * k, -2.0 + 0.2 * i] for k in range(2)]
    log_ratios = [[math.log(3.5), 0.3, -0.4], [0.05, math.log(1.5), -0.1 * i]]
    gaps = [[0.5, 3.0, -0.2], [0.4, -1.0, 0.1 * i]]  # k3 16.1 at 3.0
    old = [[lp - lr for lp, lr in zip(a, b)] for a, b in zip(logps, log_ratios)]
    ref = [[lp + g for lp, g in zip(a, b)] for a, b in zip(logps, gaps)]
    made = record(mask, logps, [-1.0, 0.5 + 0.25 * i], old=old, ref=ref, window=window)
    return dataclasses.replace(made, rank=rank)


def written_out(r, values: dict, beta: float, eps: float = 0.2) -> torch.Tensor:
    """d (sum over the micro-batch of l_t) / d logp_t by autograd: -min(r A, clip(r) A), min'd with -A c where A < 0
    when a dual clip c is declared, plus beta k3, clamped at a declared kl_clamp, times r unless declared 'never'."""
    logps = r.logps.clone().requires_grad_(True)
    adv = r.advantages.unsqueeze(1)
    ratio = torch.exp(logps - r.old_logps)
    loss = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps))
    if values["dual_clip_ratio"] is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * values["dual_clip_ratio"]), loss)
    gap = r.ref_logps - logps
    k3 = torch.exp(gap) - gap - 1
    if values["kl_clamp"] is not None:
        k3 = torch.clamp(k3, max=values["kl_clamp"])
    loss = loss + beta * (k3 if values["kl_importance_weighting"] == "never" else k3 * ratio)
    (grad,) = torch.autograd.grad((loss * r.completion_mask).sum(), logps)
    return grad


def trained(records, spec: GRPOSpec, declared, world: int):
    """`records` with the gradient the window loss of `declared` gives their log-probs: each token's l_t over the
    count the scope says (the window's tokens on every rank, or the generation's times the window's share), each
    rank's loss times the ranks."""
    values = dict(VOCABULARY.resolve(declared))
    windows: dict[int, float] = {}
    for r in records:
        windows[int(r.window)] = windows.get(int(r.window), 0.0) + float(r.completion_mask.sum())
    share = spec.gradient_accumulation_steps / spec.generation_steps
    out = []
    for r in records:
        count = windows[int(r.window)] if values["token_mean_scope"] == "window" else sum(TOKENS) * share
        out.append(dataclasses.replace(r, logp_grad=written_out(r, values, spec.beta) * world / count))
    return out


ONE_RANK = GRPOSpec(loss_type="dapo", beta=0.04, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                    steps_per_generation=4)  # fmt: skip
TWO_RANKS = ONE_RANK.with_(gradient_accumulation_steps=1, steps_per_generation=2)


def generation(world: int):
    """One generation of the four micro-batches: two windows of two, each one micro-batch per rank on two ranks."""
    if world == 1:
        return [micro_batch(i, n, window=i // 2) for i, n in enumerate(TOKENS)]
    return [micro_batch(i, n, window=i // 2, rank=i % 2) for i, n in enumerate(TOKENS)]


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("declared", ["verl", {"token_mean_scope": "window"}, "trl"])
def test_the_gradient_is_the_written_out_window_loss_over_the_scope_the_target_declares(declared, world):
    spec = ONE_RANK if world == 1 else TWO_RANKS
    records = trained(generation(world), spec, declared, world)
    resolved = VOCABULARY.resolve(declared)
    gap = gradients.gaps(records, gradients.WindowWeights.of(spec, world=world, definitions=resolved))
    assert gap.compared > 0 and gap.largest < 1e-12
    assert (gap.dual > 0) == (declared == "verl")  # a ratio of 3.5 at A < 0: the declared dual clip holds it
    other = "trl" if dict(resolved)["token_mean_scope"] == "window" else {"token_mean_scope": "window"}
    wrong = dict(resolved) | {"token_mean_scope": dict(VOCABULARY.resolve(other))["token_mean_scope"]}
    misread = gradients.gaps(records, gradients.WindowWeights.of(spec, world=world, definitions=tuple(wrong.items())))
    assert misread.largest > 0.1  # windows of 9 and 3 tokens, each half of 12


def test_the_window_scope_needs_no_full_generation_and_reads_the_windows_own_tokens():
    one, two = micro_batch(0, 5, window=0), micro_batch(1, 1, window=1)
    g = gradients.WindowWeights.of(ONE_RANK.with_(gradient_accumulation_steps=1, steps_per_generation=2),
                                   definitions=WINDOW)  # fmt: skip
    assert [float(w.max()) for w in gradients.window_weights([one], g, {})] == [1 / 5]
    assert [float(w.max()) for w in gradients.window_weights([two], g, {})] == [1.0]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_only_the_token_mean_loss_types_read_the_scope(loss_type):
    spec, records = ONE_RANK.with_(loss_type=loss_type, beta=0.0), generation(1)
    trl, window = ([w for *_, w in gradients.weighted(records, gradients.WindowWeights.of(spec, definitions=d))]
                   for d in (VOCABULARY.resolve("trl"), WINDOW))  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(trl, window)) == (loss_type not in TOKEN_MEAN_LOSS_TYPES)


def test_the_default_is_the_trl_profiles_generation_scope_and_a_bad_value_is_refused():
    assert gradients.WindowWeights.of(ONE_RANK) == gradients.WindowWeights.of(ONE_RANK,
                                                                              definitions=VOCABULARY.resolve("trl"))
    assert gradients.WindowWeights.of(ONE_RANK).token_mean_scope == "generation"
    assert gradients.WindowWeights.of(ONE_RANK, definitions=VOCABULARY.resolve("verl")).token_mean_scope == "window"
    with pytest.raises(HarnessConfigError, match="token_mean_scope"):
        VOCABULARY.resolve({"token_mean_scope": "mini_batch"})
