"""The value side of the training signal on small hand-made tensors: rewards, GAE, returns, value loss, pairing."""

from __future__ import annotations

import types

import pytest
import torch

from harness.algorithms.ppo.oracle import returns, value_signal, values
from harness.algorithms.ppo.view import MicroBatchView, RolloutView, UpdateView
from harness.errors import NotRecomputable
from harness.instrument.records import LogProbCall, MaskedMeanCall, Site, ValueHeadCall

PAD, STOP = 0, 9


def spec(**changes):
    settings = dict(kl_coef=0.5, kl_estimator="k1", missing_eos_penalty=None, whiten_rewards=False, gamma=1.0,
                    lam=1.0, cliprange_value=0.2, cliprange=0.2, dtype="float64")  # fmt: skip
    return types.SimpleNamespace(**{**settings, **changes})


def rollout(responses, logprobs, ref_logprobs, stop=STOP):
    responses = torch.tensor(responses)
    from harness.oracle.masks import derive_masks

    r, v = derive_masks(responses, stop, PAD)
    logprobs, ref = torch.tensor(logprobs, dtype=torch.float64), torch.tensor(ref_logprobs, dtype=torch.float64)
    has_stop = (responses == stop).any(dim=-1)
    return RolloutView(responses, logprobs, torch.zeros_like(logprobs), r, v, ref, None, has_stop)


def test_the_score_lands_one_past_the_last_token_or_on_it_at_the_end():
    r = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    assert returns.landing(r).tolist() == [2, 3, 0]


def test_gae_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    assert returns.gae(rewards, torch.zeros_like(rewards), 1.0, 1.0).tolist() == [[1.0, 1.0, 1.0]]
    # gamma 0.5, lam 0.5, values [1, 2, 0]: deltas [-1 + 0.5 * 2, -2 + 0, 1] = [0, -2, 1];
    # A2 = 1, A1 = -2 + 0.25 * 1, A0 = 0 + 0.25 * A1
    values = torch.tensor([[1.0, 2.0, 0.0]], dtype=torch.float64)
    got = returns.gae(rewards, values, 0.5, 0.5)
    assert torch.allclose(got, torch.tensor([[-0.4375, -1.75, 1.0]], dtype=torch.float64))


def test_reward_whitening_keeps_the_mean_and_zeroes_outside_the_mask():
    x = torch.tensor([[1.0, 2.0, 3.0, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])
    out = returns.whiten_keep_mean(x, mask)
    assert out[0, 3] == 0
    assert torch.isclose(out[0, :3].mean(), torch.tensor(2.0, dtype=torch.float64))
    assert torch.isclose(out[0, :3].var(), torch.tensor(1.0, dtype=torch.float64), atol=1e-6)


def test_rewards_kl_over_r_score_and_eos_penalty():
    ro = rollout([[5, 9, 0, 0], [5, 5, 5, 5]], [[-1.0, -2.0, -3.0, -4.0]] * 2, [[-1.5, -2.0, -1.0, -1.0]] * 2)
    got = returns.rewards(ro, [2.0, 4.0], spec(missing_eos_penalty=1.0))
    # row 0: R = t <= 1 (stop at t = 1), k1 KL = logp - ref = [0.5, 0]; score 2 lands at t = 2
    assert got[0].tolist() == [-0.25, 0.0, 2.0, 0.0]
    # row 1: no stop, full width: KL [0.5, 0, -2, -3]; score 4 - 1 (no EOS) lands on the last token
    assert got[1].tolist() == [-0.25, 0.0, 1.0, 1.5 + 3.0]
    k3 = returns.rewards(ro, [2.0, 4.0], spec(kl_estimator="k3"))
    log_r = torch.tensor(-0.5, dtype=torch.float64)
    assert torch.isclose(k3[0, 0], -0.5 * (log_r.exp() - 1 - log_r))


def test_rewards_need_scores_and_reference_log_probs():
    ro = rollout([[5, 9]], [[-1.0, -1.0]], [[-1.0, -1.0]])
    with pytest.raises(NotRecomputable, match="no scores"):
        returns.rewards(ro, None, spec())
    with pytest.raises(NotRecomputable, match="2 scores were supplied for 1"):
        returns.rewards(ro, [1.0, 2.0], spec())


def test_value_terms_clip_around_the_old_values():
    v_new = torch.tensor([[1.0, 0.1, -1.0]], dtype=torch.float64)
    v_old = torch.zeros_like(v_new)
    target = torch.tensor([[2.0, 0.0, 0.0]], dtype=torch.float64)
    loss, indicator = value_signal.value_terms(v_new, v_old, target, 0.2)
    # t0: v_clip 0.2: max((1-2)^2, (0.2-2)^2) = 3.24, clipped; t1 inside the range; t2: v_clip -0.2: 1 > 0.04
    assert torch.allclose(loss, torch.tensor([[3.24, 0.01, 1.0]], dtype=torch.float64))
    assert indicator.tolist() == [[1.0, 0.0, 0.0]]


def _site(name, function="f"):
    return Site("trainer.py", function, name)


def _update(ro, value_records, whitening, micro_batches=()):
    records = tuple(value_records)
    return UpdateView(0, 0, ro, None, tuple(micro_batches), (), records, tuple(whitening))


def _values(rows, width, grad, seq=0):
    return ValueHeadCall(_site("value_head"), seq, values=rows.reshape(-1, width), grad=grad)


def test_values_are_read_from_the_position_before_each_response_token():
    record = _values(torch.arange(12.0), 6, grad=False)  # 2 rows, prompt 3 + response 3
    assert values.response_values(record, 3, "here").tolist() == [[2.0, 3.0, 4.0], [8.0, 9.0, 10.0]]
    with pytest.raises(NotRecomputable, match="no 6 response positions"):
        values.response_values(record, 6, "here")


def test_rollout_values_need_a_record_per_row_and_are_zero_outside_v():
    ro = rollout([[5, 9, 0], [5, 5, 5]], [[-1.0] * 3] * 2, [[-1.0] * 3] * 2)
    with pytest.raises(NotRecomputable, match="value_head"):
        values.rollout_values(_update(ro, [], []))
    half = _values(torch.ones(1, 5), 5, grad=False)
    with pytest.raises(NotRecomputable, match="1 rows of rollout values"):
        values.rollout_values(_update(ro, [half], []))
    both = _values(torch.ones(2, 5), 5, grad=False)
    ro_short = rollout([[9, 0, 0], [5, 5, 5]], [[-1.0] * 3] * 2, [[-1.0] * 3] * 2)
    assert values.rollout_values(_update(ro_short, [both], [])).tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def _micro(ro, rows, vf_values, clip_values):
    mm = {
        "vf_loss": (MaskedMeanCall(_site("vf_loss"), 5, values=vf_values, mask=ro.value_mask[rows]),),
        "vf_clipfrac": (MaskedMeanCall(_site("vf_clipfrac"), 6, values=clip_values, mask=ro.value_mask[rows]),),
    }
    record = LogProbCall(_site("new_logprobs"), 4, index=ro.responses[rows], logprobs=ro.logprobs[rows])
    return MicroBatchView("update 0 micro-batch 0", record, mm, ro.response_mask[rows], ro.value_mask[rows],
                          ro.logprobs[rows], None, rows)  # fmt: skip


def test_the_value_side_of_a_correct_update_has_no_gap_and_a_wrong_one_is_flagged():
    ro = rollout([[5, 9, 0], [5, 5, 5]], [[-1.0, -2.0, -1.0]] * 2, [[-1.5, -2.0, -1.0]] * 2)
    settings, scores = spec(gamma=0.9, lam=0.8), [1.0, 2.0]
    old = torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, -0.3]], dtype=torch.float64)
    new = old + torch.tensor([[0.5, 0.01, -0.4], [0.0, -0.3, 0.05]], dtype=torch.float64)
    prompt = torch.zeros(2, 2, dtype=torch.float64)
    old_rec = ValueHeadCall(_site("value_head"), 1, values=torch.cat([prompt, old, prompt[:, :1]], 1), grad=False)
    new_rec = ValueHeadCall(_site("value_head"), 3, values=torch.cat([prompt, new, prompt[:, :1]], 1), grad=True)
    signal = returns.recompute(ro, torch.where(ro.value_mask, old, torch.zeros_like(old)), scores, settings)
    loss, indicator = value_signal.value_terms(new, signal.values, signal.returns, 0.2)
    whiten = MaskedMeanCall(_site("mean", "masked_whiten"), 2, values=signal.advantages, mask=ro.response_mask)
    rows = torch.tensor([0, 1])
    right = _update(ro, [old_rec, new_rec], [whiten], [_micro(ro, rows, loss, indicator)])
    gaps = value_signal.largest_gaps(right, settings, scores, 1e-9)
    assert {name: gap for name, (gap, _) in gaps.items()} == {n: 0.0 for n in value_signal.names(False)}
    # returns from whitened advantages (class 34), raw advantages off by one token: both are seen
    wrong_loss, _ = value_signal.value_terms(new, signal.values, signal.advantages + 1.0, 0.2)
    shifted = MaskedMeanCall(whiten.site, 2, values=signal.advantages + 0.1 * ro.response_mask, mask=whiten.mask)
    wrong = _update(ro, [old_rec, new_rec], [shifted], [_micro(ro, rows, wrong_loss, indicator)])
    gaps = value_signal.largest_gaps(wrong, settings, scores, 1e-9)
    assert gaps["per_token/advantages_raw"][0] == pytest.approx(0.1)
    assert gaps["per_token/vf_loss"][0] > 0.1


def test_reward_whitening_over_the_wrong_mask_is_not_recomputable():
    ro = rollout([[5, 9, 0], [5, 5, 5]], [[-1.0] * 3] * 2, [[-1.0] * 3] * 2)
    settings, scores = spec(whiten_rewards=True), [1.0, 2.0]
    old = ValueHeadCall(_site("value_head"), 1, values=torch.zeros(2, 5, dtype=torch.float64), grad=False)
    signal = returns.recompute(ro, torch.zeros(2, 3, dtype=torch.float64), scores, settings)
    on_r = MaskedMeanCall(_site("mean", "masked_whiten"), 2, values=signal.rewards, mask=ro.response_mask)
    adv = MaskedMeanCall(_site("mean", "masked_whiten"), 3, values=signal.advantages, mask=ro.response_mask)
    gaps = value_signal.largest_gaps(_update(ro, [old], [on_r, adv]), settings, scores, 1e-9)
    assert "rewards whitened over a mask that differs" in gaps["per_token/rewards"]
    on_v = MaskedMeanCall(on_r.site, 2, values=signal.rewards, mask=ro.value_mask)
    gaps = value_signal.largest_gaps(_update(ro, [old], [on_v, adv]), settings, scores, 1e-9)
    assert gaps["per_token/rewards"][0] == 0.0 and gaps["per_token/advantages_raw"][0] == 0.0


def test_the_value_hook_records_old_and_new_values_in_call_order():
    from harness.instrument.spy import Spy
    from harness.instrument.values import ValueRecorder

    module = types.ModuleType("fake_trainer")
    module.masked_mean = lambda values, mask, axis=None: (values * mask).sum() / mask.sum()
    module.selective_log_softmax = lambda logits, index: logits.log_softmax(-1).gather(-1, index[..., None])[..., 0]
    head = torch.nn.Linear(3, 1)
    hidden = torch.randn(2, 4, 3)
    with Spy(module) as spy, ValueRecorder(head, spy):
        with torch.no_grad():
            head(hidden)
        module.masked_mean(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool))
        head(hidden)
        with spy.paused():
            head(hidden)
    head(hidden)  # after the context: no hook left
    kinds = [(type(r).__name__, getattr(r, "grad", None)) for r in spy.records]
    assert kinds == [("ValueHeadCall", False), ("MaskedMeanCall", None), ("ValueHeadCall", True)]
    assert spy.records[0].values.shape == (2, 4) and spy.records[0].values.dtype == torch.float64
    assert spy.records[0].seq < spy.records[1].seq < spy.records[2].seq
