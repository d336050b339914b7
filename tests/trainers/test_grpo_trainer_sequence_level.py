"""The reference GRPO trainer at importance_sampling_level 'sequence' (GSPO): one ratio per completion, exp of the
mean of its tokens' log-ratios over its mask, on every token of it; clip flags per completion, pooled over the
interval's completions."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_trainers import ConfigError
from reference_trainers import grpo as G
from reference_trainers.grpo_config import LOSS_TYPES, GRPOConfig
from tests.trainers.test_grpo_trainer import make_trainer, one_generation, token_batches

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)


def config(**kw):
    base = dict(loss_type="grpo", epsilon_low=0.2, epsilon_high=0.2, delta=None, importance_sampling_level="sequence",
                sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, vespo_k_pos=2.0, vespo_lambda_pos=3.0,
                vespo_k_neg=3.0, vespo_lambda_neg=2.0)  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


@FAST
@given(token_batches(), st.floats(0.0, 0.4), st.floats(0.0, 0.4), st.sampled_from([None, 1.1]))
def test_every_token_takes_its_completions_clipped_ratio(batch, eps_low, eps_high, delta):
    values, mask = batch
    new, old = values.roll(1, dims=1) * 0.4, values.roll(2, dims=1) * 0.3
    advantages = values[:, :1]
    cfg = config(epsilon_low=eps_low, epsilon_high=eps_high, delta=delta)
    loss, ratio, flags = G.token_objective(cfg, new, old, advantages, mask)
    assert loss.shape == new.shape and ratio.shape == flags["low"].shape == (new.shape[0], 1)
    for i in range(new.shape[0]):
        n = int(mask[i].sum())
        mean = sum(new[i, j].item() - old[i, j].item() for j in range(new.shape[1]) if mask[i, j]) / max(n, 1)
        s, a = math.exp(mean), advantages[i, 0].item()
        capped = s if delta is None else min(s, delta)
        want = -min(capped * a, min(max(s, 1 - eps_low), 1 + eps_high) * a)
        assert loss[i].tolist() == pytest.approx([want] * new.shape[1], rel=1e-5, abs=1e-6)
        if abs(capped - (1 - eps_low)) > 1e-6:
            assert bool(flags["low"][i, 0]) == (capped < 1 - eps_low and a < 0)
        if abs(capped - (1 + eps_high)) > 1e-6:
            assert bool(flags["high"][i, 0]) == (capped > 1 + eps_high and a > 0)


def test_each_tokens_gradient_goes_through_its_completions_mean_log_ratio():
    """d(sum of a row's losses) / d logp_u = n * (-A s) / n = -A s on each of its n tokens (unclipped, A < 0):
    the same on every token of the row, and 0 off its mask."""
    new = torch.tensor([[0.1, -0.2, 0.3], [0.05, 0.0, 0.0]], requires_grad=True)
    old = torch.zeros(2, 3)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    adv = torch.tensor([[-1.0], [-2.0]])
    loss, ratio, _ = G.token_objective(config(), new, old, adv, mask)
    (loss * mask).sum().backward()
    s0, s1 = math.exp((0.1 - 0.2) / 2), math.exp(0.05)
    assert new.grad.tolist() == [pytest.approx([s0, s0, 0.0]), pytest.approx([2 * s1, 0.0, 0.0])]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_type_runs_at_sequence_level_and_token_level_is_unchanged(loss_type):
    new, old = torch.tensor([[0.3, -0.1, 0.2]]), torch.tensor([[0.0, 0.1, -0.1]])
    mask, adv = torch.tensor([[True, True, False]]), torch.tensor([[0.5]])
    loss, ratio, _ = G.token_objective(config(loss_type=loss_type, epsilon_high=1.0), new, old, adv, mask)
    assert ratio.shape == (1, 1) and ratio.item() == pytest.approx(math.exp((0.3 - 0.2) / 2))
    token = G.token_objective(config(loss_type=loss_type, importance_sampling_level="token", epsilon_high=1.0),
                              new, old, adv, mask)  # fmt: skip
    assert token[1].shape == new.shape


def test_the_clip_means_pool_over_completions():
    """Two micro-batches of 2 and 1 completions, 1 and 1 clipped: 2 of 3, whatever their token counts."""
    rows = torch.zeros(2, len(G.STAT_FIELDS), dtype=torch.float64)
    for field, values in (("clip_ratio/low_mean", (1, 0)), ("clip_ratio/high_mean", (0, 1)),
                          ("clip_ratio/region_mean", (1, 1)), ("count/tokens", (9, 2)),
                          ("count/completions", (2, 1))):  # fmt: skip
        rows[:, G.STAT_FIELDS.index(field)] = torch.tensor(values, dtype=torch.float64)
    got = G.sequence_clip_means(rows, "grpo")
    assert got == pytest.approx({"clip_ratio/low_mean": 1 / 3, "clip_ratio/high_mean": 1 / 3,
                                 "clip_ratio/region_mean": 2 / 3})  # fmt: skip
    assert set(G.sequence_clip_means(rows, "cispo")) == {"cispo_clip_ratio"}
    assert G.sequence_clip_means(rows, "sapo") == {}


def test_an_unknown_level_is_refused():
    with pytest.raises(ConfigError, match="importance_sampling_level must be one of token, sequence"):
        GRPOConfig(importance_sampling_level="tokens")


def test_a_sequence_level_run_logs_its_clip_means_over_completions():
    """Two passes at a high learning rate: each logged clip mean is a count of completions over the completions
    trained on (16 completions, each trained twice: 32 rows), and high_max / low_min are 0 or 1."""
    cfg = one_generation(loss_type="grpo", importance_sampling_level="sequence", per_device_train_batch_size=4,
                         gradient_accumulation_steps=2, steps_per_generation=4, num_iterations=2, learning_rate=0.05,
                         beta=0.0)  # fmt: skip
    (metrics,) = make_trainer(cfg).train()
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert metrics[name] * 32 == pytest.approx(round(metrics[name] * 32), abs=1e-4), (name, metrics[name])
    assert metrics["clip_ratio/region_mean"] > 0
    assert metrics["clip_ratio/high_max"] in (0.0, 1.0) and metrics["clip_ratio/low_min"] in (0.0, 1.0)


def test_a_micro_batch_of_empty_completions_keeps_its_sequence_level_flags():
    """The flags are one per completion, an empty one's included (TRL's cispo_clip_ratio counts every row): a
    micro-batch whose completions have no token still adds its flags' sum to the numerators, which a numerator
    taken as a token mean times the token count (0) would lose."""
    mask = torch.zeros(2, 3, dtype=torch.bool)
    means = {name: torch.tensor(0.5) for name in G.TOKEN_POOLED}
    sums = {"clip_ratio/low_mean": torch.tensor(1.0), "cispo_clip_ratio": torch.tensor(2.0)}
    row = G.microbatch_stats(means, torch.zeros(()), torch.tensor(0.0), torch.zeros(2), mask, sums)
    got = dict(zip(G.STAT_FIELDS, row.tolist()))
    assert got["clip_ratio/low_mean"] == 1 and got["cispo_clip_ratio"] == 2 and got["count/completions"] == 2
    assert got["entropy"] == 0 and got["clip_ratio/high_mean"] == 0  # a mean times no token
