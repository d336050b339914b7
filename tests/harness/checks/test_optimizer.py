"""The optimizer step check: torch's own AdamW, Adam and SGD pass it; a state reset, weights written outside the
step, a setting changed while training and an optimizer the oracle does not know do not."""

from __future__ import annotations

import pytest
import torch

from harness.checks.optimizer import NAME, OUTSIDE, STATE_RESET, judge_steps
from harness.instrument.grad import GradRecorder
from harness.oracle.optimizer import Optimizer, kind_of
from harness.verdict import Check, CheckId, MetricStatus


def _train(make, steps: int = 6, copies: bool = True, between=None, schedule=None, dtype=torch.float32):
    """A tiny model trained `steps` steps by `make(params)` under a recorder; `between(k, optimizer, params)` runs
    before each step; the frozen trace."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(5, 3, dtype=dtype))
    bias = torch.nn.Parameter(torch.randn(3, dtype=dtype))
    frozen = torch.nn.Parameter(torch.randn(2, dtype=dtype))  # in the optimizer, never given a gradient
    params = [weight, bias, frozen]
    optimizer = make(params)
    scheduler = schedule(optimizer) if schedule else None
    with GradRecorder(params, optimizer, copies=copies) as recorder:
        for k in range(steps):
            x = torch.randn(4, 5, dtype=dtype)
            loss = ((x @ weight + bias) ** 2).mean() + 0.1 * (x @ weight).abs().mean()
            loss.backward()
            if between is not None:
                between(k, optimizer, params)
            optimizer.step()
            optimizer.zero_grad()
            if scheduler is not None:
                scheduler.step()
    return recorder.trace()


def _judge(trace, declared=None):
    check = Check(CheckId(NAME))
    judge_steps(trace, check, declared)
    return check.finish()


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, eps=1e-5, weight_decay=0.1),
    "adamw_amsgrad_maximize": lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True, maximize=True),
    "adam_l2": lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.8, 0.99), weight_decay=0.05),
    "adam_decoupled": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.05, decoupled_weight_decay=True),
    "adamw_groups": lambda ps: torch.optim.AdamW(
        [{"params": ps[:1]}, {"params": ps[1:], "weight_decay": 0.0}], lr=3e-3, weight_decay=0.2, foreach=False
    ),  # fmt: skip
    "sgd": lambda ps: torch.optim.SGD(ps, lr=5e-2),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=5e-2, momentum=0.9, dampening=0.1, weight_decay=0.01),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=5e-2, momentum=0.9, nesterov=True, maximize=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_torch_optimizers_pass_the_recomputation(name):
    result = _judge(_train(OPTIMIZERS[name]))
    assert result.passed, result.message
    (metric,) = result.metrics
    assert metric.status is MetricStatus.PASS and metric.tol > 0 and metric.abs_err <= metric.tol


def test_a_schedule_and_float64_weights_pass():
    halving = lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)  # noqa: E731
    assert _judge(_train(OPTIMIZERS["adamw"], schedule=halving)).passed
    assert _judge(_train(OPTIMIZERS["adamw"], dtype=torch.float64)).passed


def test_a_parameter_without_gradient_must_stay_put():
    trace = _train(OPTIMIZERS["adamw"])
    frozen = [u.before[2] is u.after[2] or torch.equal(u.before[2], u.after[2]) for u in trace.updates]
    assert all(frozen) and not any(u.has_grad[2] for u in trace.updates)


def test_a_state_cleared_between_updates_fails_and_is_diagnosed():
    clear = lambda k, o, ps: o.state.clear() if k == 3 else None  # noqa: E731
    result = _judge(_train(OPTIMIZERS["adamw"], between=clear))
    assert not result.passed
    assert "first disagreement at step 4" in result.metrics[0].reason
    assert [d.classes for d in result.diagnoses] == [(STATE_RESET,)]


def test_weights_written_outside_the_step_fail():
    def decay(k, optimizer, params):
        with torch.no_grad():
            params[0].mul_(1 - 1e-4)

    result = _judge(_train(OPTIMIZERS["adamw"], between=decay))
    assert not result.passed
    assert "step 1: the weights of parameter(s) [0] changed between the run's start and the step" in result.message
    assert [d.classes for d in result.diagnoses] == [(OUTSIDE,)]


def test_a_setting_changed_while_training_fails():
    def eps(k, optimizer, params):
        if k == 2:
            optimizer.param_groups[0]["eps"] = 1e-8

    result = _judge(_train(OPTIMIZERS["adamw"], between=eps))
    assert "step 3: param group 0's eps is 1e-08, 1e-05 at step 1" in result.message


def test_betas_changed_after_a_step_are_followed_not_failed():
    def betas(k, optimizer, params):
        if k == 2:
            optimizer.param_groups[0]["betas"] = (0.85, 0.99)

    assert _judge(_train(OPTIMIZERS["adamw"], between=betas)).passed


def test_a_gradient_changed_after_the_recorder_saw_it_fails():
    trace = _train(OPTIMIZERS["adamw"])
    forged = trace.steps[1].grads[0]
    forged.mul_(1.01)  # as if the optimizer had applied another gradient than .grad
    result = _judge(trace)
    assert "first disagreement at step 2, parameter 0" in result.metrics[0].reason


def test_an_unknown_optimizer_is_not_recomputable_unless_declared():
    rmsprop = lambda ps: torch.optim.RMSprop(ps, lr=1e-2)  # noqa: E731
    result = _judge(_train(rmsprop))
    (metric,) = result.metrics
    assert not result.passed and metric.status is MetricStatus.NOT_RECOMPUTABLE
    assert "'RMSprop' is none the oracle recomputes" in metric.reason
    assert _judge(_train(rmsprop), declared="lion").metrics[0].status is MetricStatus.NOT_RECOMPUTABLE
    assert kind_of(("MyOptimizer", "Optimizer", "object"), declared="AdamW") == "adamw"
    assert kind_of(("MyAdamW", "AdamW", "Adam", "Optimizer", "object")) == "adamw"


def test_a_run_without_the_copies_fails_naming_grad_copies():
    result = _judge(_train(OPTIMIZERS["adamw"], copies=False))
    assert "grad_copies()" in result.message and not result.passed


def test_the_oracle_follows_torchs_adamw_in_float64():
    torch.manual_seed(1)
    p = torch.nn.Parameter(torch.randn(7, dtype=torch.float64))
    optimizer = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.3)
    twin = Optimizer("adamw")
    for _ in range(5):
        before, grad = p.detach().clone(), torch.randn(7, dtype=torch.float64)
        p.grad = grad.clone()
        optimizer.step()
        expected, tol = twin.step(0, before, grad, optimizer.param_groups[0], 2.0**-53)
        assert torch.allclose(p.detach(), expected, rtol=0, atol=1e-14) and bool((tol > 0).all())
