"""The reference GRPO trainer: its pieces against slow loops, and whole runs (pooling, gradients, learning)."""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_trainers import ConfigError, toy
from reference_trainers import common as C
from reference_trainers import grpo as G
from reference_trainers.grpo_config import CLIPPED_LOSS_TYPES, LOSS_TYPES, SCALE_REWARDS, GRPOConfig

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)
RUNS = settings(max_examples=8, deadline=None, derandomize=True, database=None)
CUT_INVARIANT = tuple(t for t in LOSS_TYPES if t != "bnpo")
"""bnpo normalises each micro-batch by its own tokens (TRL's local batch): its objective depends on the cut."""

floats = st.floats(-3, 3, allow_nan=False, width=32)


def nan_rewards(num_generations: int, max_groups: int = 3):
    """Rewards of whole groups, with an occasional NaN (a row no function could score)."""
    cell = st.one_of(st.integers(-2, 2).map(float), floats, st.just(math.nan))
    return st.integers(1, max_groups).flatmap(
        lambda groups: st.lists(cell, min_size=groups * num_generations, max_size=groups * num_generations)
    )


@st.composite
def token_batches(draw, max_rows=6, max_len=6):
    rows, length = draw(st.integers(1, max_rows)), draw(st.integers(1, max_len))
    matrix = st.lists(st.lists(floats, min_size=length, max_size=length), min_size=rows, max_size=rows)
    mask = st.lists(st.lists(st.booleans(), min_size=length, max_size=length), min_size=rows, max_size=rows)
    return torch.tensor(draw(matrix)), torch.tensor(draw(mask))


# ------------------------------------------------------------------ pieces against loops


def slow_std(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    if len(values) < 2:
        return math.nan
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


@FAST
@given(st.integers(2, 4).flatmap(lambda g: st.tuples(st.just(g), nan_rewards(g))), st.sampled_from(SCALE_REWARDS))
def test_group_advantages_match_a_loop(drawn, scale):
    num_generations, rewards = drawn
    advantages, zero_std = G.group_advantages(torch.tensor(rewards, dtype=torch.float64), num_generations, scale)
    batch_std = slow_std(rewards)
    for start in range(0, len(rewards), num_generations):
        group = rewards[start : start + num_generations]
        scored = [r for r in group if not math.isnan(r)]
        mean = sum(scored) / len(scored) if scored else math.nan
        std = slow_std(group)
        for i, r in enumerate(group, start):
            want = r - mean
            if scale == "group":
                want /= std + 1e-4
            elif scale == "batch":
                want /= batch_std + 1e-4
            want = 0.0 if math.isnan(want) else want
            assert advantages[i].item() == pytest.approx(want, rel=1e-9, abs=1e-9)
            assert bool(zero_std[i]) == (not math.isnan(std) and std <= 1e-8)


def test_weighted_rewards_leave_out_what_a_function_could_not_score():
    per_function = torch.tensor([[1.0, 2.0], [math.nan, 3.0], [math.nan, math.nan]], dtype=torch.float64)
    rewards = G.weighted_rewards(per_function, torch.tensor([0.5, 2.0], dtype=torch.float64))
    assert rewards[:2].tolist() == [4.5, 6.0] and math.isnan(rewards[2])


@FAST
@given(token_batches(), st.floats(0.0, 0.4), st.floats(0.0, 0.4), st.sampled_from([None, 1.1, 1.5]))
def test_clipped_objective_matches_a_loop(batch, eps_low, eps_high, delta):
    advantages_per_token, mask = batch
    new, old = advantages_per_token.roll(1, dims=1) * 0.4, advantages_per_token.roll(2, dims=1) * 0.3
    advantages = advantages_per_token[:, :1]
    loss, coef_1, low, high = G.clipped_objective(new, old, advantages, eps_low, eps_high, delta)
    for i in range(new.shape[0]):
        a = advantages[i, 0].item()
        for j in range(new.shape[1]):
            r = math.exp(new[i, j].item() - old[i, j].item())
            clipped = min(max(r, 1 - eps_low), 1 + eps_high)
            capped = r if delta is None else min(r, delta)
            assert loss[i, j].item() == pytest.approx(-min(capped * a, clipped * a), rel=1e-5, abs=1e-6)
            # a ratio within rounding of a bound may fall on either side of it (torch.exp in the tensors' dtype
            # and math.exp in float64 differ by a few float32 ulps, about 1e-7 near 1; 3.4e-12 was seen to
            # flip): its indicator is not compared within 1e-6 of the bound
            if abs(capped - (1 - eps_low)) > 1e-6:
                assert bool(low[i, j]) == (capped < 1 - eps_low and a < 0)
            if abs(capped - (1 + eps_high)) > 1e-6:
                assert bool(high[i, j]) == (capped > 1 + eps_high and a > 0)


def test_kl_is_k3_times_the_ratio_when_bias_corrected():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -0.5]])
    ratio = torch.tensor([[1.2, 0.7]])
    k3 = [math.exp(r - p) - (r - p) - 1 for p, r in zip(logp[0].tolist(), ref[0].tolist())]
    assert G.kl_to_reference(logp, ref, None)[0].tolist() == pytest.approx(k3)
    assert G.kl_to_reference(logp, ref, ratio)[0].tolist() == pytest.approx([k * r for k, r in zip(k3, [1.2, 0.7])])


def slow_window_loss(loss_type, per_token_loss, mask, generation_tokens, share, max_len, micro) -> float:
    """The loss type's objective of one window cut into the row slices `micro`, written out over rows and tokens."""
    rows = [
        [(per_token_loss[i, j].item(), bool(mask[i, j])) for j in range(mask.shape[1])] for i in range(mask.shape[0])
    ]
    token_sum = sum(x for row in rows for x, m in row if m)
    if loss_type in ("grpo", "sapo"):
        means = [sum(x for x, m in row if m) / max(sum(m for _, m in row), 1) for row in rows]
        return sum(means) / len(rows)
    if loss_type == "bnpo":  # each micro-batch's own token mean, averaged over the micro-batches
        means = []
        for part in micro:
            cells = [(x, m) for row in rows[part] for x, m in row]
            means.append(sum(x for x, m in cells if m) / max(sum(m for _, m in cells), 1))
        return sum(means) / len(means)
    if loss_type == "dr_grpo":
        return token_sum / (len(rows) * max_len)
    if loss_type == "luspo":
        return token_sum / len(rows)
    return token_sum / (generation_tokens * share)


@FAST
@given(
    token_batches(max_rows=12),
    st.sampled_from(LOSS_TYPES),
    st.integers(1, 3),
    st.integers(1, 4),
    st.data(),
)
def test_a_window_cut_into_micro_batches_and_ranks_sums_to_its_objective(batch, loss_type, ranks, steps, data):
    per_token_loss, mask = batch
    rows = mask.shape[0]
    generation_tokens = mask.sum().item() + data.draw(st.integers(0, 20))  # the window is part of a generation
    share = data.draw(st.sampled_from([0.25, 0.5, 1.0]))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(rows - 1, 1)), max_size=4)))) if rows > 1 else []
    micro = [slice(a, b) for a, b in zip([0, *cuts], [*cuts, rows])]
    counts = G.WindowCounts(float(rows), generation_tokens, share, float(len(micro)))
    denominator = G.loss_denominator(loss_type, counts, mask.shape[1])
    # each micro-batch belongs to some rank; every rank's loss is scaled by the world size and DDP averages
    total = 0.0
    for part in micro:
        token_loss = G.masked_mean(per_token_loss[part], mask[part])
        completion_loss = G.masked_mean(per_token_loss[part], mask[part], axis=1)
        numerator = G.loss_numerator(loss_type, token_loss, completion_loss, mask[part])
        total += (numerator * ranks / denominator).item() / ranks
    want = slow_window_loss(loss_type, per_token_loss, mask, max(generation_tokens, 1), share, mask.shape[1], micro)
    assert total == pytest.approx(want, rel=1e-5, abs=1e-6)


def stat_row(tokens: int, completions: int, entropy_sum: float = 0.0) -> torch.Tensor:
    row = torch.zeros(len(G.STAT_FIELDS), dtype=torch.float64)
    row[G.STAT_FIELDS.index("entropy")] = entropy_sum
    row[G.STAT_FIELDS.index("count/tokens")] = tokens
    row[G.STAT_FIELDS.index("count/completions")] = completions
    return row


def test_pooled_stats_divide_once_and_skip_empty_microbatches():
    rows = torch.stack([stat_row(6, 2, 6.0), stat_row(0, 2), stat_row(2, 2, 4.0)])
    metrics = G.pooled_stats(rows, "dapo", 8, with_kl=False)
    assert metrics["entropy"] == pytest.approx(10.0 / 8)  # not (1 + 0 + 2) / 3, not (1 + 2) / 2
    assert "kl" not in metrics and all(math.isfinite(v) for v in metrics.values())
    assert G.pooled_stats(torch.stack([stat_row(0, 2)]), "grpo", 8, with_kl=True)["kl"] == 0.0


def test_extremes_are_extremes_of_rows_with_tokens():
    # micro-batch 1: high flag means 0.5 and 0.0; micro-batch 2: 0.25, and an empty row whose 0 must not count
    first = torch.tensor([[0.5, 0.5, 1.0], [0.25, 0.0, 1.0]], dtype=torch.float64)
    second = torch.tensor([[0.75, 0.25, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    extremes = G.clip_extremes(torch.cat([first, second]))
    assert extremes == {"clip_ratio/low_min": 0.25, "clip_ratio/high_max": 0.5}
    mean_of_maxima = (0.5 + 0.25) / 2
    assert extremes["clip_ratio/high_max"] != mean_of_maxima
    assert G.clip_extremes(second[1:]) == {"clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.0}


def test_completion_stats_over_completions_each_once():
    # length, terminated, reward, zero_std, one reward function (NaN: could not score)
    rows = torch.tensor(
        [[3, 1, 1.0, 0, 1.0], [8, 0, 2.0, 0, 2.0], [5, 1, math.nan, 1, math.nan], [2, 1, 4.0, 1, 4.0]],
        dtype=torch.float64,
    )
    metrics = G.completion_stats(rows, ["count"])
    assert metrics["completions/mean_length"] == 4.5
    assert (metrics["completions/min_length"], metrics["completions/max_length"]) == (2, 8)
    assert metrics["completions/clipped_ratio"] == 0.25
    assert metrics["completions/mean_terminated_length"] == pytest.approx(10 / 3)
    assert (metrics["completions/min_terminated_length"], metrics["completions/max_terminated_length"]) == (2, 5)
    assert metrics["reward"] == pytest.approx(7 / 3) and metrics["rewards/count/mean"] == pytest.approx(7 / 3)
    assert metrics["reward_std"] == pytest.approx(slow_std([1.0, 2.0, 4.0]))
    assert metrics["frac_reward_zero_std"] == 0.5
    none_ended = G.completion_stats(rows[1:2], ["count"])
    assert none_ended["completions/mean_terminated_length"] == 0.0 and none_ended["reward_std"] == 0.0


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(per_device_train_batch_size=3, steps_per_generation=1), "per_device_train_batch_size .*num_generations"),
        (dict(per_device_train_batch_size=0), "per_device_train_batch_size=0"),
        (dict(gradient_accumulation_steps=-1), "gradient_accumulation_steps=-1"),
        (dict(steps_per_generation=0), "steps_per_generation=0"),
        (dict(num_iterations=0, max_steps=0), "num_iterations=0, max_steps=0"),
        (dict(num_generations=1), "num_generations"),
        (dict(loss_type="gspo"), "loss_type"),
        (dict(sapo_temperature_neg=0.0), "sapo_temperature_neg"),
        (dict(scale_rewards="row"), "scale_rewards"),
        (dict(epsilon_low=1.0), "epsilon_low"),
    ],
)
def test_bad_sizes_give_a_clear_error(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        GRPOConfig(**{"per_device_train_batch_size": 4, "num_generations": 4, **kwargs})


def test_derived_sizes():
    cfg = GRPOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=3, steps_per_generation=4)
    assert (cfg.local_generation_batch_size, cfg.prompts_per_generation, cfg.window_sizes) == (16, 4, (3, 1))
    cfg = GRPOConfig(gradient_accumulation_steps=3, num_generations=2)
    assert (cfg.steps_per_generation, cfg.window_sizes) == (3, (3,))
    cfg = GRPOConfig(gradient_accumulation_steps=4, steps_per_generation=2, num_iterations=3, num_generations=2)
    assert cfg.window_sizes == (4, 2)


# ------------------------------------------------------------------ whole runs


def make_trainer(cfg: GRPOConfig, seed: int = 0, rewards=None, callbacks=(), **world):
    from accelerate import Accelerator

    built = toy.build_world(seed=seed, independent_ref=True, **world)
    return G.GRPOTrainer(
        cfg,
        built.policy,
        built.ref_policy,
        rewards or {"count_w7": toy.count_token_reward(7)},
        built.prompts,
        built.pad_token_id,
        callbacks=callbacks,
        accelerator=Accelerator(cpu=True),
    )


def one_generation(**kw) -> GRPOConfig:
    """A config whose single logging interval is exactly one generation batch."""
    base = dict(num_generations=4, max_completion_length=8, stop_token_id=1, beta=0.1, seed=0)
    probe = GRPOConfig(**{**base, **kw})
    steps = len(probe.window_sizes)
    return GRPOConfig(**{**base, **kw, "max_steps": steps, "logging_steps": steps})


@pytest.mark.slow
def test_it_learns_to_say_the_target_token():
    cfg = GRPOConfig(
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        num_generations=4,
        max_steps=30,
        learning_rate=3e-3,
        max_completion_length=8,
        stop_token_id=1,
        seed=0,
    )
    history = make_trainer(cfg).train()
    assert len(history) == 30
    start = sum(m["reward"] for m in history[:3]) / 3
    end = sum(m["reward"] for m in history[-3:]) / 3
    assert end > start + 2.0, (start, end)


def test_same_seed_same_metrics():
    cfg = dict(gradient_accumulation_steps=1, steps_per_generation=3, max_steps=4, learning_rate=1e-2, beta=0.1)
    first = make_trainer(GRPOConfig(**cfg)).train()
    second = make_trainer(GRPOConfig(**cfg)).train()
    assert first == second and len(first) == 4


@functools.cache
def lr0_metrics(per_device, accumulation, per_generation, iterations, loss_type) -> tuple:
    cfg = one_generation(
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=per_generation,
        num_iterations=iterations,
        loss_type=loss_type,
        learning_rate=0.0,
    )
    (metrics,) = make_trainer(cfg, pad_logit_bias=2.0).train()
    return tuple(sorted((k, v) for k, v in metrics.items() if k not in ("step", "learning_rate")))


@st.composite
def cuts_of_twelve(draw):
    """(per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation, num_iterations), 12 rows."""
    per_device = draw(st.sampled_from([1, 2, 3, 4, 6, 12]))
    per_generation = 12 // per_device
    iterations = draw(st.integers(1, 2))
    accumulation = draw(st.integers(1, per_generation * iterations))
    return per_device, accumulation, per_generation, iterations


@RUNS
@given(cuts_of_twelve(), st.sampled_from(LOSS_TYPES))
def test_lr0_metrics_do_not_depend_on_the_cut(cut, loss_type):
    base = dict(lr0_metrics(12, 1, 1, 1, loss_type))
    other = dict(lr0_metrics(*cut, loss_type))
    assert other.keys() == base.keys()
    for name, value in base.items():
        if loss_type == "bnpo" and name == "policy_loss":  # a mean of micro-batch means, by its definition
            continue
        assert other[name] == pytest.approx(value, rel=1e-5, abs=1e-6), (name, cut)
    if loss_type in CLIPPED_LOSS_TYPES:
        for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
            assert other[name] == 0.0
        assert other["clip_ratio/low_min"] == 0.0 and other["clip_ratio/high_max"] == 0.0
    else:
        assert not any(name.startswith("clip_ratio/") for name in other)
    if loss_type == "vespo":
        assert other["vespo/phi_seq_mean"] == pytest.approx(1.0)  # phi(1) = 1
    assert base["completions/min_length"] == 0.0 < base["completions/max_length"]  # uneven, with empty completions
    assert base["kl"] > 0.0


def record_windows(trainer):
    """[(window's generation batch, its micro-batches, the gradient at its step)] as the trainer runs."""
    windows, grads = [], []
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    real = trainer.window_step

    def window_step(micro_batches):
        (batch,) = {id(b): b for b, _ in micro_batches}.values()  # these runs' windows end with their generation
        windows.append((batch, [rows for _, rows in micro_batches]))
        return real(micro_batches)

    trainer.window_step = window_step
    trainer.optimizer.optimizer.register_step_pre_hook(
        lambda *_: grads.append([p.grad.detach().clone() for p in params])
    )
    trainer.train()
    return [(b, m, g) for (b, m), g in zip(windows, grads, strict=True)], params


def slow_token_loss(cfg: GRPOConfig, logp, old, adv, mask):
    """(per-token loss before the KL term, the ratio its KL is corrected by), each loss type written out."""
    ratio = torch.exp(logp - old)
    if cfg.loss_type == "cispo":
        return -torch.minimum(ratio, torch.tensor(cfg.epsilon_high)).detach() * adv * logp, ratio
    if cfg.loss_type == "sapo":
        tau = torch.tensor([[cfg.sapo_temperature_pos if a > 0 else cfg.sapo_temperature_neg] for a in adv[:, 0]])
        return -(4 / tau) * torch.sigmoid(tau * (ratio - 1)) * adv, ratio
    if cfg.loss_type == "vespo":
        weights = []
        for i, a in enumerate(adv[:, 0].tolist()):
            log_w = float(((logp[i] - old[i]) * mask[i]).sum())
            k, lam = (cfg.vespo_k_pos, cfg.vespo_lambda_pos) if a >= 0 else (cfg.vespo_k_neg, cfg.vespo_lambda_neg)
            weights.append(math.exp(lam + k * log_w - lam * math.exp(log_w)))
        return -torch.tensor(weights).unsqueeze(1) * adv * logp, ratio
    return -torch.min(ratio * adv, ratio.clamp(1 - cfg.epsilon_low, 1 + cfg.epsilon_high) * adv), ratio


def slow_objective(policy, cfg: GRPOConfig, pad: int, parts) -> torch.Tensor:
    """One window's loss in one piece from its rows on every rank, `parts` = [(batch, micro-batches)] per rank.

    Rows trained twice in the window count twice; the normalisation is written out per loss type.
    """
    row_sums, row_tokens, micro_means = [], [], []
    for batch, micro_batches in parts:
        for rows in micro_batches:
            ids = batch.completion_ids[rows]
            logits = C.policy_logits(policy, batch.prompt_completion_ids[rows], batch.context_length, pad,
                                     cfg.temperature)  # fmt: skip
            logp = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
            old = logp.detach() if batch.old_per_token_logps is None else batch.old_per_token_logps[rows]
            mask = batch.completion_mask[rows].float()
            loss, ratio = slow_token_loss(cfg, logp, old, batch.advantages[rows].unsqueeze(1), mask)
            if cfg.beta:
                ref = batch.ref_per_token_logps[rows]
                loss = loss + cfg.beta * (torch.exp(ref - logp) - (ref - logp) - 1) * ratio
            row_sums += list((loss * mask).sum(dim=1))
            row_tokens += mask.sum(dim=1).tolist()
            micro_means.append((loss * mask).sum() / max(mask.sum().item(), 1))
    if cfg.loss_type in ("grpo", "sapo"):
        return sum(s / max(n, 1) for s, n in zip(row_sums, row_tokens)) / len(row_sums)
    if cfg.loss_type == "bnpo":
        return sum(micro_means) / len(micro_means)
    if cfg.loss_type == "dr_grpo":
        return sum(row_sums) / (len(row_sums) * cfg.max_completion_length)
    if cfg.loss_type == "luspo":
        return sum(row_sums) / len(row_sums)
    generation_tokens = sum(batch.completion_mask.sum().item() for batch, _ in parts)
    return sum(row_sums) / (generation_tokens * len(parts[0][1]) / cfg.steps_per_generation)


def assert_same_gradient(got, want, rel=1e-6):
    for g, w in zip(got, want, strict=True):
        w = torch.zeros_like(g) if w is None else w
        assert torch.allclose(g, w, rtol=1e-4, atol=rel * max(w.abs().max().item(), 1e-3))


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("cut", [(4, 3, 3, 1), (2, 6, 6, 1), (4, 1, 3, 1), (4, 2, 3, 1), (4, 6, 3, 2), (6, 1, 2, 2)])
def test_each_window_gradient_is_its_loss_types_objective(loss_type, cut):
    per_device, accumulation, per_generation, iterations = cut
    cfg = one_generation(
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=per_generation,
        num_iterations=iterations,
        loss_type=loss_type,
        learning_rate=0.0,
    )
    trainer = make_trainer(cfg, pad_logit_bias=2.0)
    windows, params = record_windows(trainer)
    assert [len(m) for _, m, _ in windows] == list(cfg.window_sizes)
    for batch, micro_batches, grads in windows:
        objective = slow_objective(trainer.model, cfg, trainer.pad_token_id, [(batch, micro_batches)])
        assert_same_gradient(grads, torch.autograd.grad(objective, params, allow_unused=True))


def test_the_gradient_of_a_generation_does_not_depend_on_the_cut():
    # one window per generation: every loss type's gradient but bnpo's is a function of the generation batch alone
    for loss_type in CUT_INVARIANT:
        grads = []
        for per_device, per_generation in [(12, 1), (4, 3), (2, 6)]:
            cfg = one_generation(
                per_device_train_batch_size=per_device,
                gradient_accumulation_steps=per_generation,
                steps_per_generation=per_generation,
                loss_type=loss_type,
                learning_rate=0.0,
            )
            (window,), _ = record_windows(make_trainer(cfg, pad_logit_bias=2.0))
            grads.append(window[2])
        for other in grads[1:]:
            for a, b in zip(grads[0], other):
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-5 * a.abs().max().item()), loss_type


def spied_run(cfg: GRPOConfig, **world):
    from harness.instrument.spy import Spy

    trainer = make_trainer(cfg, **world)
    with Spy(G) as spy:
        history = trainer.train()
    return history, spy


def pooled_from_records(records) -> float:
    return (sum((r.values * r.mask).sum() for r in records) / sum(r.mask.sum() for r in records)).item()


def test_every_role_has_its_own_call_site():
    cfg = GRPOConfig(gradient_accumulation_steps=1, steps_per_generation=2, max_steps=2, beta=0.1, stop_token_id=1)
    _, spy = spied_run(cfg)
    assert {r.name for r in spy.calls("selective_log_softmax")} == {
        "old_per_token_logps",
        "ref_per_token_logps",
        "per_token_logps",
    }
    assert {r.name for r in spy.calls("masked_mean")} == {
        "token_loss",
        "completion_loss",
        "mean_entropy",
        "mean_kl",
        "low_clip_mean",
        "high_clip_mean",
        "region_clip_mean",
        "cispo_clip_mean",
        "low_clip_per_completion",
        "high_clip_per_completion",
    }
    assert len(spy.calls("selective_log_softmax", "per_token_logps")) == 2  # one micro-batch per step


def test_token_means_are_one_sum_over_one_count_per_interval():
    # uneven lengths and empty completions; two passes of 4 micro-batches in windows of 3, so every
    # generation ends with a short window (3, 3, 2; TRL issue 7047); two generations per interval, and a
    # partial last interval
    cfg = GRPOConfig(
        per_device_train_batch_size=4,
        gradient_accumulation_steps=3,
        steps_per_generation=4,
        num_iterations=2,
        max_steps=10,
        logging_steps=6,
        learning_rate=3e-2,
        beta=0.1,
        stop_token_id=1,
        max_completion_length=8,
    )
    history, spy = spied_run(cfg, pad_logit_bias=2.0)
    assert [m["step"] for m in history] == [6, 10]
    sizes = cfg.window_sizes * 4
    per_interval = [sum(sizes[:6]), sum(sizes[6:10])]
    assert per_interval == [16, 11]
    sites = {"entropy": "mean_entropy", "kl": "mean_kl", "clip_ratio/high_mean": "high_clip_mean"}
    for metric, site in sites.items():
        records = spy.calls("masked_mean", site)
        assert len(records) == sum(per_interval)
        first, second = records[: per_interval[0]], records[per_interval[0] :]
        for logged, part in zip(history, (first, second)):
            assert logged[metric] == pytest.approx(pooled_from_records(part), rel=1e-6, abs=1e-9), metric
    flat = sum(r.result.item() for r in spy.calls("masked_mean", "mean_entropy")[:16]) / 16
    assert abs(flat - history[0]["entropy"]) > 1e-3  # the mean of micro-batch means would be visibly off


def test_high_max_is_the_maximum_not_a_mean_of_micro_batch_maxima():
    cfg = GRPOConfig(
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        steps_per_generation=4,
        max_steps=4,
        logging_steps=4,
        learning_rate=5e-2,
        stop_token_id=1,
        max_completion_length=8,
    )
    (metrics,), spy = spied_run(cfg)
    per_micro_batch = [r.result[r.mask.any(dim=1)] for r in spy.calls("masked_mean", "high_clip_per_completion")]
    maxima = [values.max().item() for values in per_micro_batch if len(values)]
    assert len(maxima) == 4 and maxima[0] == 0.0  # the first window is on-policy: nothing is clipped
    assert metrics["clip_ratio/high_max"] == max(maxima) > 0
    assert metrics["clip_ratio/high_max"] != pytest.approx(sum(maxima) / len(maxima))
    lows = [r.result[r.mask.any(dim=1)] for r in spy.calls("masked_mean", "low_clip_per_completion")]
    assert metrics["clip_ratio/low_min"] == min(values.min().item() for values in lows if len(values))


def test_callbacks_receive_every_interval_and_intervals_are_fresh():
    seen = []
    cfg = GRPOConfig(gradient_accumulation_steps=1, steps_per_generation=2, max_steps=3, logging_steps=2)
    history = make_trainer(cfg, callbacks=[lambda m, step: seen.append((step, m["reward"]))]).train()
    assert [step for step, _ in seen] == [2, 3]
    # the second interval trained half of the second generation only: its completions, not the first ones
    assert history[0]["completions/mean_length"] != history[1]["completions/mean_length"]


def test_no_dropout_acts_so_lr0_clip_ratios_are_zero():
    from accelerate import Accelerator
    from torch import nn

    world = toy.build_world(seed=0, dropout=0.1)
    world.policy.model.layers[0].mlp.act_fn = nn.Sequential(nn.SiLU(), nn.Dropout(0.5))
    cfg = GRPOConfig(
        gradient_accumulation_steps=1, steps_per_generation=2, max_steps=2, logging_steps=2, learning_rate=0.0
    )
    trainer = G.GRPOTrainer(
        cfg, world.policy, None, toy.count_token_reward(7), world.prompts, world.pad_token_id,
        accelerator=Accelerator(cpu=True),
    )  # fmt: skip
    assert trainer.train()[0]["clip_ratio/region_mean"] == 0.0
    assert not any(m.training for m in trainer.model.modules())


def test_reward_functions_are_named_and_weighted():
    cfg = GRPOConfig(reward_weights=(1.0, -0.5))
    metrics = make_trainer(cfg, rewards=[toy.count_token_reward(7), length_reward]).train()[0]
    assert {"rewards/reward/mean", "rewards/length_reward/mean"} <= metrics.keys()
    want = metrics["rewards/reward/mean"] - 0.5 * metrics["rewards/length_reward/mean"]
    assert metrics["reward"] == pytest.approx(want)
    with pytest.raises(ConfigError, match="reward_weights"):
        make_trainer(GRPOConfig(reward_weights=(1.0,)), rewards=[toy.count_token_reward(7), length_reward])
    with pytest.raises(ConfigError, match="distinct names"):
        make_trainer(cfg, rewards=[toy.count_token_reward(7), toy.count_token_reward(8)])
    with pytest.raises(ConfigError, match="ref_policy"):
        from accelerate import Accelerator

        world = toy.build_world(seed=0)
        G.GRPOTrainer(
            GRPOConfig(beta=0.1), world.policy, None, length_reward, world.prompts, 0, accelerator=Accelerator(cpu=True)
        )


def length_reward(queries: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    return (completions != 0).sum(dim=1).float()


# ------------------------------------------------------------------ two ranks

TWO_RANKS = dict(
    per_device_train_batch_size=4,
    gradient_accumulation_steps=2,
    steps_per_generation=3,  # windows of 2 and 1 micro-batches, old log-probs from generation
    max_steps=2,
    learning_rate=0.0,
    beta=0.1,
    stop_token_id=1,
    max_completion_length=8,
)


def two_rank_worker(out: str) -> None:
    """One rank of the two-rank test: train under the spy for every loss type, save what the test checks."""
    from accelerate import Accelerator

    from harness.instrument.spy import Spy

    acc = Accelerator(cpu=True)
    for loss_type in LOSS_TYPES:
        world = toy.build_world(seed=0, independent_ref=True, pad_logit_bias=2.0)
        cfg = GRPOConfig(**TWO_RANKS, loss_type=loss_type)
        rewards = {"count_w7": toy.count_token_reward(7)}
        trainer = G.GRPOTrainer(
            cfg, world.policy, world.ref_policy, rewards, world.prompts, world.pad_token_id, accelerator=acc
        )
        with Spy(G) as spy:
            windows, _ = record_windows(trainer)
        records = {site: spy.calls("masked_mean", site) for site in sites(loss_type).values()}
        saved = {"history": trainer.history, "records": records, "windows": windows}
        torch.save(saved, Path(out) / f"{loss_type}-rank{acc.process_index}.pt")
    # leave together: a rank that exits while the other still holds the process group can abort in its teardown
    # (SIGABRT, "terminate called without an active exception", seen under load)
    acc.wait_for_everyone()
    torch.distributed.destroy_process_group()


def sites(loss_type: str) -> dict[str, str]:
    """Logged metric -> the name its masked_mean call site assigns (the clip flag's: the loss type's own)."""
    flag = {"cispo": {"cispo_clip_ratio": "cispo_clip_mean"}}.get(loss_type, {})
    if loss_type in CLIPPED_LOSS_TYPES:
        flag = {"clip_ratio/region_mean": "region_clip_mean"}
    return {"entropy": "mean_entropy", "kl": "mean_kl", **flag}


@pytest.mark.slow
@pytest.mark.dist
def test_two_ranks_log_the_pool_of_their_union_and_step_on_its_objective(tmp_path):
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        + [__file__, "--worker", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for loss_type in LOSS_TYPES:
        ranks = [torch.load(tmp_path / f"{loss_type}-rank{i}.pt", weights_only=False) for i in range(2)]
        history = ranks[0]["history"]
        assert history == ranks[1]["history"] and len(history) == 2
        for metric, site in sites(loss_type).items():
            for interval, part in zip(history, (slice(0, 2), slice(2, 3))):  # windows of 2 and 1 micro-batches
                union = [record for rank in ranks for record in rank["records"][site][part]]
                assert interval[metric] == pytest.approx(pooled_from_records(union), rel=1e-6, abs=1e-9)
        policy = toy.build_world(seed=0, independent_ref=True, pad_logit_bias=2.0).policy
        cfg = GRPOConfig(**TWO_RANKS, loss_type=loss_type)
        for (batch0, micro0, grads0), (batch1, micro1, grads1) in zip(ranks[0]["windows"], ranks[1]["windows"]):
            assert all(torch.equal(a, b) for a, b in zip(grads0, grads1))
            objective = slow_objective(policy, cfg, 0, [(batch0, micro0), (batch1, micro1)])
            params = [p for p in policy.parameters() if p.requires_grad]
            assert_same_gradient(grads0, torch.autograd.grad(objective, params, allow_unused=True))


if __name__ == "__main__":  # a rank of the two-rank test, started by torch.distributed.run
    two_rank_worker(sys.argv[sys.argv.index("--worker") + 1])


@pytest.mark.parametrize("gas, spg, old", [(3, 2, True), (4, 2, False), (2, 4, True)])
def test_windows_across_generations_hold_whole_windows_each_divided_by_its_own_generation(gas, spg, old):
    """With windows_across_generations every window holds gradient_accumulation_steps micro-batches, whichever
    generations they come from; a dapo micro-batch is divided by its own generation's tokens times the window's
    share; old log-probs are kept unless every window is whole generations (TRL's rule)."""
    cfg = GRPOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=gas, steps_per_generation=spg,
                     max_steps=3, logging_steps=3, num_generations=4, max_completion_length=8, stop_token_id=1,
                     beta=0.1, windows_across_generations=True)  # fmt: skip
    trainer = make_trainer(cfg)
    assert trainer.needs_old_logps is old
    seen = []  # (optimizer step, generation, denominator) of every micro-batch
    micro_step = trainer.micro_step

    def spied(batch, rows, denominator):
        assert (batch.old_per_token_logps is not None) is old
        seen.append((trainer.step, batch.index, denominator))
        return micro_step(batch, rows, denominator)

    trainer.micro_step = spied
    tokens = {}
    generate = trainer.generate

    def counted():
        batch = generate()
        tokens[batch.index] = batch.generation_tokens
        return batch

    trainer.generate = counted
    trainer.train()
    assert [sum(1 for s, _, _ in seen if s == step) for step in range(3)] == [gas] * 3
    assert any(len({g for s, g, _ in seen if s == step}) > 1 for step in range(3)) is (spg % gas != 0)
    for _, generation, denominator in seen:
        assert denominator == pytest.approx(tokens[generation] * gas / spg)
    assert len(tokens) == -(-3 * gas // spg)  # only the generations the steps need (the rest of the last waits)
