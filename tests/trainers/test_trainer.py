"""The reference trainer: its pieces against slow loops, and whole runs (learning, determinism, geometry)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_trainers import ConfigError, PPOConfig, toy
from reference_trainers import common as C
from reference_trainers import ppo as T

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)


@st.composite
def batches(draw, max_rows=4, max_len=7):
    rows = draw(st.integers(1, max_rows))
    length = draw(st.integers(1, max_len))
    floats = st.floats(-3, 3, allow_nan=False, width=32)
    values = torch.tensor(
        draw(st.lists(st.lists(floats, min_size=length, max_size=length), min_size=rows, max_size=rows))
    )
    mask = torch.tensor(
        draw(st.lists(st.lists(st.booleans(), min_size=length, max_size=length), min_size=rows, max_size=rows))
    )
    return values.double(), mask


# ------------------------------------------------------------------ pieces against loops


@FAST
@given(batches())
def test_masked_mean_and_sum_match_a_loop(batch):
    values, mask = batch
    picked = [values[i, j].item() for i in range(values.shape[0]) for j in range(values.shape[1]) if mask[i, j]]
    assert T.masked_sum(values, mask).item() == pytest.approx(sum(picked), abs=1e-9)
    expected_mean = sum(picked) / len(picked) if picked else 0.0
    assert T.masked_mean(values, mask).item() == pytest.approx(expected_mean, abs=1e-9)


@FAST
@given(batches())
def test_masked_whiten_matches_a_loop(batch):
    values, mask = batch
    picked = [values[i, j].item() for i in range(values.shape[0]) for j in range(values.shape[1]) if mask[i, j]]
    out = T.masked_whiten(values, mask)
    if len(picked) < 2:
        return
    mean = sum(picked) / len(picked)
    var = sum((p - mean) ** 2 for p in picked) / (len(picked) - 1)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if mask[i, j]:
                want = (values[i, j].item() - mean) / math.sqrt(var + 1e-8)
                assert out[i, j].item() == pytest.approx(want, abs=1e-6)


@FAST
@given(batches(), st.floats(0.5, 1.0), st.floats(0.0, 1.0))
def test_gae_matches_the_textbook_loop(batch, gamma, lam):
    rewards, _ = batch
    values = rewards.flip(1) * 0.5
    adv, ret = T.compute_gae(rewards, values, gamma, lam)
    rows, length = rewards.shape
    for i in range(rows):
        for t in range(length):
            # A_t = sum_k (gamma*lam)^k delta_{t+k}, delta_t = r_t + gamma V_{t+1} - V_t, V_T = 0
            total = 0.0
            for k in range(t, length):
                next_v = values[i, k + 1].item() if k + 1 < length else 0.0
                delta = rewards[i, k].item() + gamma * next_v - values[i, k].item()
                total += (gamma * lam) ** (k - t) * delta
            assert adv[i, t].item() == pytest.approx(total, abs=1e-9)
            assert ret[i, t].item() == pytest.approx(total + values[i, t].item(), abs=1e-9)


@FAST
@given(batches(), st.floats(0.05, 0.4))
def test_policy_loss_matches_a_loop(batch, eps):
    advantages, mask = batch
    new = advantages.roll(1, dims=1) * 0.3
    old = advantages.roll(2, dims=1) * 0.2
    pg_loss, clipfrac, ratio, _ = T.policy_loss(new, old, advantages, mask, eps)
    terms, clips = [], []
    for i in range(mask.shape[0]):
        for j in range(mask.shape[1]):
            if mask[i, j]:
                r = math.exp(new[i, j].item() - old[i, j].item())
                a = advantages[i, j].item()
                unclipped, clipped = -a * r, -a * min(max(r, 1 - eps), 1 + eps)
                terms.append(max(unclipped, clipped))
                clips.append(float(clipped > unclipped))
    n = max(len(terms), 1)
    assert pg_loss.item() == pytest.approx(sum(terms) / n, abs=1e-9)
    assert clipfrac.item() == pytest.approx(sum(clips) / n, abs=1e-6)  # a float32 indicator mean


@FAST
@given(batches(), st.floats(0.05, 0.4))
def test_value_loss_matches_a_loop(batch, clip):
    vpred, mask = batch
    old, returns = vpred.roll(1, dims=1), vpred.roll(2, dims=1) * 2
    vf_loss, vf_clipfrac = T.value_loss(vpred, old, returns, mask, clip)
    terms, clips = [], []
    for i in range(mask.shape[0]):
        for j in range(mask.shape[1]):
            if mask[i, j]:
                v, o, g = vpred[i, j].item(), old[i, j].item(), returns[i, j].item()
                vc = min(max(v, o - clip), o + clip)
                terms.append(0.5 * max((v - g) ** 2, (vc - g) ** 2))
                clips.append(float((vc - g) ** 2 > (v - g) ** 2))
    n = max(len(terms), 1)
    assert vf_loss.item() == pytest.approx(sum(terms) / n, abs=1e-9)
    assert vf_clipfrac.item() == pytest.approx(sum(clips) / n, abs=1e-6)


def test_truncation_and_masks():
    responses = torch.tensor([[5, 1, 7, 8], [5, 6, 7, 8], [1, 4, 4, 4], [0, 5, 1, 3]])
    post = T.truncate_at_stop(responses, stop_token_id=1, pad_token_id=0)
    assert post.tolist() == [[5, 1, 0, 0], [5, 6, 7, 8], [1, 0, 0, 0], [0, 5, 1, 0]]
    lengths, r, v = T.response_masks(post, pad_token_id=0)
    assert lengths.tolist() == [1, 3, 0, -1]
    assert r.sum(1).tolist() == [2, 4, 1, 0]
    assert v.sum(1).tolist() == [3, 4, 2, 1]


def test_model_inputs_skip_pads_wherever_they_are():
    """Left-padded prompts, right-padded responses: pads are masked, ids there are 0, positions count real tokens."""
    pad = 9
    query_responses = torch.tensor([[9, 9, 3, 4, 5, 9], [2, 3, 4, 5, 6, 7]])
    inputs = C.model_inputs(query_responses, pad)
    assert sorted(inputs) == ["attention_mask", "input_ids", "position_ids"]
    assert inputs["attention_mask"].tolist() == [[False, False, True, True, True, False], [True] * 6]
    assert inputs["input_ids"].tolist() == [[0, 0, 3, 4, 5, 0], [2, 3, 4, 5, 6, 7]]
    assert inputs["position_ids"].tolist() == [[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]


def test_pooled_stats_divide_once_and_skip_empty_microbatches():
    # two micro-batches: 3 response tokens with ratio sum 3.3, and an all-masked one
    row = torch.zeros(len(T.STAT_FIELDS), dtype=torch.float64)
    full, empty = row.clone(), row.clone()
    full[T.STAT_FIELDS.index("val/ratio")] = 3.3
    full[T.STAT_FIELDS.index("count/response")] = 3
    full[T.STAT_FIELDS.index("count/value")] = 4
    empty[T.STAT_FIELDS.index("count/value")] = 1
    third = full.clone()
    third[T.STAT_FIELDS.index("val/ratio")] = 0.9
    third[T.STAT_FIELDS.index("count/response")] = 1
    metrics = T.pooled_stats(torch.stack([full, empty, third]))
    assert metrics["val/ratio"] == pytest.approx(4.2 / 4)
    assert metrics["val/ratio_var"] == pytest.approx(torch.tensor([1.1, 0.9]).double().var().item())
    assert all(math.isfinite(v) for v in metrics.values())


# ------------------------------------------------------------------ whole runs


def make_trainer(cfg: PPOConfig, seed: int = 0, reward=None, callbacks=()):
    from accelerate import Accelerator

    world = toy.build_world(seed=seed, independent_ref=True)
    return T.PPOTrainer(
        cfg,
        world.policy,
        world.ref_policy,
        world.value_model,
        reward or world.reward_model,
        world.prompts,
        world.pad_token_id,
        callbacks=callbacks,
        accelerator=Accelerator(cpu=True),
    )


def uneven(**kw) -> PPOConfig:
    base = dict(per_device_train_batch_size=4, gradient_accumulation_steps=3, num_mini_batches=2, stop_token_id=1)
    return PPOConfig(**{**base, **kw})


@pytest.mark.slow
def test_it_learns_to_say_the_target_token():
    cfg = PPOConfig(
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        num_mini_batches=2,
        num_ppo_epochs=2,
        learning_rate=3e-3,
        total_updates=30,
        response_length=8,
        kl_coef=0.01,
        stop_token_id=1,
        seed=0,
    )
    history = make_trainer(cfg, reward=toy.count_token_reward(7)).train()
    start = sum(m["objective/scores"] for m in history[:3]) / 3
    end = sum(m["objective/scores"] for m in history[-3:]) / 3
    assert end > start + 2.0, (start, end)


def test_same_seed_same_metrics():
    first = make_trainer(uneven(learning_rate=1e-2, total_updates=2)).train()
    second = make_trainer(uneven(learning_rate=1e-2, total_updates=2)).train()
    assert first == second


@pytest.mark.parametrize("epochs", [1, 2])
def test_uneven_split_at_lr0_logs_the_identities(epochs):
    metrics = make_trainer(uneven(learning_rate=0.0, num_ppo_epochs=epochs)).train()[0]
    assert metrics["val/ratio"] == pytest.approx(1.0, abs=1e-6)
    assert metrics["val/ratio_var"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["policy/approxkl_avg"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["policy/clipfrac_avg"] == 0.0


def test_each_epoch_trains_every_row_once_in_minibatches_drawn_afresh(monkeypatch):
    """The data schedule minibatch_schedule holds a trainer to: each epoch a fresh permutation of the rollout, cut
    into minibatches; over four epochs of 12 rows in two minibatches of 6 the partitions are not all one (a repeat
    has probability 1/462 per pair of epochs; seed 0 draws four different ones)."""
    trainer = make_trainer(uneven(learning_rate=0.0, num_ppo_epochs=4))
    seen, step = [], trainer.minibatch_step
    monkeypatch.setattr(trainer, "minibatch_step", lambda ro, rows: seen.append(rows.tolist()) or step(ro, rows))
    trainer.train()
    epochs = [seen[e : e + 2] for e in range(0, 8, 2)]
    assert len(seen) == 8 and all(sorted(a + b) == list(range(12)) for a, b in epochs)
    assert len({frozenset(map(frozenset, epoch)) for epoch in epochs}) == 4


def record_steps(trainer):
    """(backward passes, optimizer steps) per update, from hooks on the trainer's parameters and optimizer."""
    from harness.instrument.grad import GradRecorder

    optimizer = trainer.optimizer.optimizer
    recorder = GradRecorder(list(trainer.model.parameters()), optimizer, clock=lambda: trainer.update)
    with recorder:
        trainer.train()
    return recorder


@pytest.mark.parametrize("epochs", [1, 2])
def test_every_microbatch_reaches_a_step_in_its_own_update(epochs):
    trainer = make_trainer(uneven(learning_rate=1e-2, num_ppo_epochs=epochs, total_updates=2))
    rec = record_steps(trainer)
    for update in range(2):
        backwards = [i for i, u in enumerate(rec.backwards) if u == update]
        steps = [s for s in rec.steps if s.clock == update]
        assert len(backwards) == 4 * epochs and len(steps) == 2 * epochs
        assert sorted(i for s in steps for i in s.backward_ids) == backwards
    assert rec.unapplied == []
    assert max(s.unexplained for s in rec.steps) < 1e-6


def test_lr0_gradient_does_not_depend_on_the_cut():
    cuts = [(4, 3), (2, 6), (6, 2)]
    grads = []
    for bs, gas in cuts:
        rec = record_steps(
            make_trainer(uneven(learning_rate=0.0, per_device_train_batch_size=bs, gradient_accumulation_steps=gas))
        )
        grads.append([s.grad for s in rec.steps])
    for other in grads[1:]:
        assert len(other) == len(grads[0]) == 2
        for a, b in zip(grads[0], other):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-7 * a.abs().max().item())


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(num_mini_batches=5), "num_mini_batches"),
        (dict(per_device_train_batch_size=0), "per_device_train_batch_size=0"),
        (dict(gradient_accumulation_steps=-1), "gradient_accumulation_steps=-1"),
        (dict(kl_estimator="k2"), "kl_estimator"),
        (dict(num_ppo_epochs=0), "num_ppo_epochs=0"),
        (dict(temperature=0.0), "temperature"),
        (dict(learning_rate=-1e-3), "learning_rate"),
    ],
)
def test_bad_sizes_give_a_clear_error(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        uneven(**kwargs)


def test_callbacks_receive_every_update():
    seen = []
    make_trainer(uneven(total_updates=2), callbacks=[lambda m, u: seen.append((u, m["val/ratio"]))]).train()
    assert [u for u, _ in seen] == [0, 1]


def test_no_dropout_acts_so_lr0_ratios_are_exactly_one():
    """Both kinds of dropout, an nn.Dropout module and Llama's functional attention dropout: eval mode stops both."""
    from accelerate import Accelerator
    from torch import nn

    world = toy.build_world(seed=0, dropout=0.1)
    world.policy.model.layers[0].mlp.act_fn = nn.Sequential(nn.SiLU(), nn.Dropout(0.5))
    trainer = T.PPOTrainer(
        uneven(learning_rate=0.0), world.policy, world.ref_policy, world.value_model, world.reward_model,
        world.prompts, world.pad_token_id, accelerator=Accelerator(cpu=True),
    )  # fmt: skip
    metrics = trainer.train()[0]
    assert not any(m.training for m in trainer.model.modules())
    assert metrics["val/ratio"] == pytest.approx(1.0, abs=1e-6) and metrics["val/ratio_var"] == pytest.approx(0.0)
    assert metrics["policy/approxkl_avg"] == pytest.approx(0.0, abs=1e-12)


def test_a_reward_on_decoded_text_trains():
    world = toy.build_world(seed=0)
    seen = []

    def count_w7(prompts, texts):
        seen.append(texts)
        return [text.split().count("w7") for text in texts]

    reward = T.decoded_reward(count_w7, world.tokenizer)
    metrics = make_trainer(uneven(total_updates=1), reward=reward).train()[0]
    assert len(seen) == 1 and len(seen[0]) == 12 and all("[PAD]" not in t for t in seen[0])
    assert metrics["objective/scores"] == pytest.approx(sum(t.split().count("w7") for t in seen[0]) / 12)
