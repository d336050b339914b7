"""The gradient oracles on hand-made tensors: dL/dlogp against autograd, the decomposition, the rank reduction."""

from __future__ import annotations

import types

import pytest
import torch

from harness.algorithms.ppo.oracle import decomposition, gradients, value_gradients
from harness.algorithms.ppo.tolerances import TOLERANCES
from harness.errors import NotRecomputable
from harness.instrument.grad import Step
from harness.instrument.spy import Spy
from harness.instrument.values import ValueRecorder
from harness.oracle.gradients import reduction
from harness.verdict import Check, CheckId

EPS = 0.2


def test_logp_gradient_by_hand():
    # ratio 1 (inside), 1.3 with A < 0 (unclipped larger), 1.3 with A > 0 (clipped larger), 0.7 with A > 0
    # (unclipped larger), and a token outside R
    a = torch.tensor([[1.0, -1.0, 2.0, 0.5, 3.0]], dtype=torch.float64)
    ratio = torch.tensor([[1.0, 1.3, 1.3, 0.7, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True, False]])
    got = gradients.logp_gradient(a, ratio.log(), mask, EPS, count=8)
    want = torch.tensor([[-1.0 / 8, 1.3 / 8, 0.0, -0.35 / 8, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


def test_logp_gradient_is_autograds_of_the_minibatch_token_mean():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    log_ratio = 0.3 * torch.randn(3, 7, generator=gen, dtype=torch.float64)
    mask = torch.rand(3, 7, generator=gen) > 0.3
    count = int(mask.sum()) + 5  # the other micro-batches of the minibatch add tokens to the count
    logp = log_ratio.clone().requires_grad_(True)
    ratio = logp.exp()
    per_token = torch.maximum(-a * ratio, -a * ratio.clamp(1 - EPS, 1 + EPS))
    (torch.where(mask, per_token, torch.zeros_like(per_token)).sum() / count).backward()
    off_edge = ~gradients.near_the_clip(log_ratio, EPS, 1e-9)
    want = gradients.logp_gradient(a, log_ratio, mask, EPS, count)
    torch.testing.assert_close(torch.where(off_edge, logp.grad, 0.0), torch.where(off_edge, want, 0.0))


def test_factor_note_names_a_common_factor_and_a_mean_of_means():
    assert "0.5 times the formula's in every micro-batch" in gradients.factor_note([(0.5, 10, 30), (0.5, 20, 30)])
    # each micro-batch's own mean over 3: factor = N / (n * 3)
    note = gradients.factor_note([(30 / (10 * 3), 10, 30), (30 / (20 * 3), 20, 30)])
    assert "(1/3) times each micro-batch's own token mean's" in note
    assert gradients.factor_note([(0.5, 10, 30), (2.0, 20, 30)]).startswith("recorded dL/dlogp over")
    assert gradients.factor_note([(float("nan"), 0, 0)]) == ""


def test_minibatches_refuse_an_uneven_grouping():
    update = types.SimpleNamespace(index=0, micro_batches=(1, 2, 3))
    with pytest.raises(NotRecomputable, match="do not make minibatches of 2"):
        gradients.minibatches(update, 2)


def test_decomposition_weights_by_token_counts():
    policy = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0])]
    value = [torch.tensor([4.0, 0.0]), torch.tensor([0.0, 4.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])]
    counts = [(1, 3), (3, 1), (0, 2), (2, 2)]
    got = decomposition.expected_steps(counts, policy, value, per_minibatch=2)
    torch.testing.assert_close(got[0], torch.tensor([0.25 + 3.0, 0.75 + 1.0], dtype=torch.float64))
    # a micro-batch with no response token adds nothing to the policy part
    torch.testing.assert_close(got[1], torch.tensor([2.0 + 0.5, 2.0 + 0.5], dtype=torch.float64))
    with pytest.raises(NotRecomputable, match="3 single-micro-batch steps for 4"):
        decomposition.expected_steps(counts, policy[:3], None, per_minibatch=2)
    assert decomposition.relative_gap(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64)) == 0


def _update(rows: list[list[int]], responses: torch.Tensor) -> types.SimpleNamespace:
    micro = [
        types.SimpleNamespace(
            rollout_rows=torch.tensor(r), response_mask=torch.ones(len(r), 2, dtype=torch.bool),
            value_mask=torch.ones(len(r), 3, dtype=torch.bool), old_problem=None,
        )
        for r in rows
    ]  # fmt: skip
    return types.SimpleNamespace(rollout=types.SimpleNamespace(responses=responses), rollout_problem=None,
                                 micro_batches=tuple(micro))  # fmt: skip


def test_same_rows_reads_counts_and_refuses_other_rows():
    responses = torch.arange(8).reshape(4, 2)
    a, b = _update([[0, 1], [2, 3]], responses), _update([[1, 0], [2, 3]], responses)
    assert decomposition.same_rows(a, b) == [(4, 6), (4, 6)]
    with pytest.raises(NotRecomputable, match="not the same permutation"):
        decomposition.same_rows(a, _update([[0, 2], [1, 3]], responses))
    with pytest.raises(NotRecomputable, match="different rollouts"):
        decomposition.same_rows(a, _update([[0, 1], [2, 3]], responses + 1))


def _step(grad: list[float], local: list[float]) -> Step:
    return Step(0, [0], [torch.tensor(grad)], 0.0, local=(torch.tensor(local),))


def test_reduction_finds_the_average_and_fails_a_gradient_left_local():
    check = Check(CheckId("logp_gradient", (("ranks", 2),)))
    averaged = [_step([2.0, 3.0], [1.0, 2.0]), _step([2.0, 3.0], [3.0, 4.0])]
    assert reduction(averaged, "step 1", check, TOLERANCES) == pytest.approx(0.5)
    assert not check.failed
    # rank 1's second micro-batch never reduced: its .grad differs from rank 0's
    left = [_step([2.0, 3.0], [1.0, 2.0]), _step([2.5, 3.0], [3.0, 4.0])]
    reduction(left, "step 1", check, TOLERANCES)
    assert check.failed


def test_the_spy_records_the_gradient_at_the_returned_log_probs():
    module = types.ModuleType("fake_trainer")

    def selective_log_softmax(logits, index):
        return torch.gather(logits.log_softmax(-1), -1, index.unsqueeze(-1)).squeeze(-1)

    module.selective_log_softmax = selective_log_softmax
    module.masked_mean = lambda values, mask, axis=None: (values * mask).sum() / mask.sum()
    logits = torch.randn(2, 3, 5, requires_grad=True)
    index = torch.randint(0, 5, (2, 3))
    with Spy(module) as spy:
        with torch.no_grad():
            module.selective_log_softmax(logits, index)  # no grad: nothing to hook
        new_logprobs = module.selective_log_softmax(logits, index)
        (3.0 * new_logprobs).sum().backward()
    first, second = spy.finished()
    assert first.grad is None
    torch.testing.assert_close(second.grad, torch.full((2, 3), 3.0, dtype=torch.float64))


def test_a_micro_batch_no_backward_reached_is_not_recomputable():
    micro = types.SimpleNamespace(where="update 0 micro-batch 0", record=types.SimpleNamespace(grad=None))
    with pytest.raises(NotRecomputable, match="no gradient reached the log-probs"):
        gradients.recorded(micro)
    nothing = types.SimpleNamespace(rollout=None, rollout_problem="no rollout")
    expected = gradients.expectation(nothing, 1, EPS, "float32")
    assert expected[1][gradients.METRIC].value is None and "no rollout" in expected[1][gradients.METRIC].reason


def test_value_gradient_by_hand():
    # v_old 0, clip 0.2, G 1: v inside the range; v 0.5 clipped to 0.2 (clipped square larger: 0); v -0.5
    # clipped to -0.2 (unclipped square larger); a token outside V
    v = torch.tensor([[0.1, 0.5, -0.5, 0.1]], dtype=torch.float64)
    zeros, g = torch.zeros_like(v), torch.ones_like(v)
    mask = torch.tensor([[True, True, True, False]])
    got = value_gradients.value_gradient(v, zeros, g, mask, 0.2, coef=0.1, count=4)
    want = torch.tensor([[0.1 * -0.9 / 4, 0.0, 0.1 * -1.5 / 4, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


def test_value_gradient_is_autograds_of_the_minibatch_value_term():
    gen = torch.Generator().manual_seed(0)
    v_old, returns = torch.randn(3, 7, generator=gen, dtype=torch.float64), torch.randn(3, 7, generator=gen)
    returns = returns.double()
    v_new = (v_old + 0.4 * torch.randn(3, 7, generator=gen, dtype=torch.float64)).requires_grad_(True)
    mask = torch.rand(3, 7, generator=gen) > 0.3
    count, coef, clip = int(mask.sum()) + 5, 0.1, 0.2
    v_clip = torch.maximum(torch.minimum(v_new, v_old + clip), v_old - clip)
    larger = torch.maximum((v_new - returns) ** 2, (v_clip - returns) ** 2)
    (coef * 0.5 * torch.where(mask, larger, torch.zeros_like(larger)).sum() / count).backward()
    want = value_gradients.value_gradient(v_new.detach(), v_old, returns, mask, clip, coef, count)
    torch.testing.assert_close(v_new.grad, want)


def test_the_value_recorder_keeps_the_gradient_of_training_forwards_only():
    module = types.ModuleType("fake_trainer")
    module.masked_mean = lambda values, mask, axis=None: (values * mask).sum() / mask.sum()
    module.selective_log_softmax = lambda logits, index: logits
    head = torch.nn.Linear(4, 1)
    x = torch.randn(2, 5, 4)
    with Spy(module) as spy, ValueRecorder(head, spy):
        with torch.no_grad():
            head(x)  # the rollout's values: no gradient to keep
        (2.0 * head(x).squeeze(-1)[:, 2:4]).sum().backward()  # responses of 2 after 5 - 2 positions
    old, new = spy.finished()
    assert old.dvalues is None and new.grad
    want = torch.zeros(2, 5, 1, dtype=torch.float64)
    want[:, 2:4] = 2.0
    torch.testing.assert_close(new.dvalues, want)
    got, unused = value_gradients.recorded(new, 2, "here")  # response positions 3, 4 read at 2, 3
    torch.testing.assert_close(got, torch.full((2, 2), 2.0, dtype=torch.float64))
    assert unused == 0.0
    assert value_gradients.recorded(new, 1, "here")[1] == 2.0  # read at 3 only: a gradient where none belongs


def test_a_value_head_no_backward_reached_is_not_recomputable():
    record = types.SimpleNamespace(dvalues=None, values=torch.zeros(1, 4))
    with pytest.raises(NotRecomputable, match="no gradient reached the value head's output"):
        value_gradients.recorded(record, 2, "update 0 micro-batch 0")
    nothing = types.SimpleNamespace(rollout=None, rollout_problem="no rollout", index=0)
    spec = types.SimpleNamespace(dtype="float32", cliprange_value=0.2, vf_coef=0.1)
    expected = value_gradients.expectation(nothing, spec, None, 1)
    metric = expected[1][value_gradients.METRIC]
    assert metric.value is None and "no rollout" in metric.reason
