"""The learning-rate schedule check: transformers' schedulers stepped once per optimizer step pass it; a schedule
advanced per backward pass, a scheduler stepped before the optimizer and an optimizer without the configured decay,
betas or eps fail it, each diagnosed; a run that recorded no step fails it, never passes."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import get_scheduler

from harness.checks.lr_schedule import (
    AHEAD,
    DECAY,
    LOGGED,
    NO_DECAY,
    PER_BACKWARD,
    PER_PROCESS,
    RATE,
    SETTINGS,
    UNCONFIGURED,
    judge_schedule,
)
from harness.errors import HarnessConfigError
from harness.instrument.grad import GradRecorder
from harness.instrument.grad_trace import GradTrace
from harness.oracle.schedules import KINDS, Schedule
from harness.verdict import Check, CheckId, MetricStatus

BASE, STEPS, WARMUP, PASSES = 1e-2, 6, 2, 2


def _train(kind="linear", order="after", decay=0.1, groups=False, steps=STEPS, **adam):
    """A tiny model trained `steps` AdamW steps of PASSES backward passes each under transformers' scheduler
    `kind`, stepped `order` ('after' the optimizer, 'before' it, at every 'backward', or 'twice' after it, as
    accelerate's prepared scheduler on two processes), AdamW built with `adam` (betas, eps; torch's defaults where
    none); the trace and the rates a trainer would log after each step."""
    torch.manual_seed(0)
    weight, bias = torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(3))
    params = [{"params": [weight]}, {"params": [bias], "weight_decay": 0.0}] if groups else [weight, bias]
    optimizer = torch.optim.AdamW(params, lr=BASE, weight_decay=decay, **adam)
    scheduler = get_scheduler(kind, optimizer, num_warmup_steps=WARMUP, num_training_steps=steps)
    logged = []
    with GradRecorder([weight, bias], optimizer, copies=True) as recorder, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Detected call of `lr_scheduler")  # the bugs, on purpose
        for _ in range(steps):
            for _ in range(PASSES):
                x = torch.randn(4, 5)
                ((x @ weight + bias) ** 2).mean().backward()
                if order == "backward":
                    scheduler.step()
            if order == "before":
                scheduler.step()
            optimizer.step()
            for _ in range(2 if order == "twice" else int(order == "after")):
                scheduler.step()
            optimizer.zero_grad()
            logged.append(optimizer.param_groups[0]["lr"])
    return recorder.trace(), logged


def _judge(trace, logs=None, kind="linear", decay=0.1, steps=STEPS, settings=None, **where):
    check = Check(CheckId("lr_schedule"))
    judge_schedule(trace, check, Schedule(kind, BASE, WARMUP, steps), decay, logs, settings=settings, **where)
    return check.finish()


def _metric(result, name):
    return next(m for m in result.metrics if m.name == name)


@pytest.mark.parametrize("kind", KINDS)
def test_the_oracle_gives_transformers_rates(kind):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=BASE)
    scheduler = get_scheduler(kind, optimizer, num_warmup_steps=WARMUP, num_training_steps=9)
    schedule = Schedule(kind, BASE, WARMUP, 9)
    for k in range(9):
        assert abs(optimizer.param_groups[0]["lr"] - schedule.rate(k)) <= 1e-15, (kind, k)
        optimizer.step()
        scheduler.step()


@pytest.mark.parametrize("kind", KINDS)
def test_a_scheduler_stepped_once_per_optimizer_step_passes(kind):
    trace, logged = _train(kind)
    after = [(n + 1, lr) for n, lr in enumerate(logged)]  # the rate after each step, as the reference logs it
    result = _judge(trace, after, kind)
    assert result.passed, result.message
    assert {m.name for m in result.metrics} == {RATE, DECAY, LOGGED}
    at = [(n + 1, lr) for n, lr in enumerate(trace_rates(trace))]  # the rate each step used, as TRL logs it
    assert _judge(trace, at, kind).passed


def trace_rates(trace: GradTrace) -> list[float]:
    return [update.groups[0]["lr"] for update in trace.updates]


def test_biases_left_undecayed_pass_and_no_decay_fails_diagnosed():
    assert _judge(_train(groups=True)[0]).passed  # transformers' groups: the weight decayed, the bias not
    result = _judge(_train(decay=0.0)[0])
    assert (not result.passed)
    metric = _metric(result, DECAY)
    assert metric.status is MetricStatus.FAIL and metric.diagnosis.classes == (NO_DECAY,), result.message
    assert _metric(result, RATE).status is MetricStatus.PASS


DECLARED = {"betas": (0.8, 0.99), "eps": 1e-6}


def test_the_declared_betas_and_eps_pass_and_torchs_defaults_fail_diagnosed():
    configured = _train(betas=(0.8, 0.99), eps=1e-6)[0]
    result = _judge(configured, settings=DECLARED)
    assert result.passed and _metric(result, SETTINGS).status is MetricStatus.PASS, result.message
    assert SETTINGS not in {m.name for m in _judge(configured).metrics}  # none declared: not judged
    result = _judge(_train()[0], settings=DECLARED)  # AdamW at torch's defaults: 0.9, 0.999 and 1e-8
    metric = _metric(result, SETTINGS)
    assert (not result.passed) and metric.diagnosis is not None and metric.diagnosis.classes == (UNCONFIGURED,)
    assert "betas (0.9, 0.999), the run declares (0.8, 0.99)" in metric.reason, metric.reason
    result = _judge(_train(betas=(0.8, 0.99))[0], settings=DECLARED)  # the betas handed over, the eps not
    assert (not result.passed) and "eps 1e-08, the run declares 1e-06" in _metric(result, SETTINGS).reason
    assert _metric(result, RATE).status is MetricStatus.PASS and _metric(result, DECAY).status is MetricStatus.PASS


def test_a_setting_within_its_tolerance_passes_and_one_beyond_it_fails():
    trace = _train(betas=(0.8, 0.99), eps=1e-6)[0]
    near = {"betas": (0.8 * (1 + 1e-8), 0.99), "eps": 1e-6 * (1 - 1e-8)}  # a float32 copy is 6e-8 off at most
    assert _judge(trace, settings=near).passed
    far = {"betas": (0.8, 0.99 * (1 + 1e-4)), "eps": 1e-6}
    assert not _judge(trace, settings=far).passed


def test_a_group_without_the_declared_setting_fails_loudly():
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(3))
    optimizer = torch.optim.SGD([weight], lr=BASE)  # SGD holds no betas
    with GradRecorder([weight], optimizer, copies=True) as recorder:
        weight.sum().backward()
        optimizer.step()
    check = Check(CheckId("lr_schedule"))
    judge_schedule(recorder.trace(), check, Schedule("constant", BASE, 0, 1), 0.0, None, settings=DECLARED)
    result = check.finish()
    metric = _metric(result, SETTINGS)
    assert (not result.passed) and metric.diagnosis is None and "no betas like the declared" in metric.reason


def test_a_schedule_advanced_per_backward_pass_fails_diagnosed():
    result = _judge(_train(order="backward")[0])
    metric = _metric(result, RATE)
    assert (not result.passed) and metric.status is MetricStatus.FAIL, result.message
    assert metric.diagnosis is not None and metric.diagnosis.classes == (PER_BACKWARD,), metric.reason


def test_a_scheduler_stepped_before_the_optimizer_fails_diagnosed():
    result = _judge(_train(order="before")[0])
    metric = _metric(result, RATE)
    assert (not result.passed) and metric.diagnosis is not None and metric.diagnosis.classes == (AHEAD,), metric.reason


def test_a_schedule_stepped_once_per_process_fails_diagnosed_on_a_rank():
    result = _judge(_train(order="twice")[0], where="rank 1", world=2)
    metric = _metric(result, RATE)
    assert not result.passed and metric.where == "rank 1", result.message
    assert metric.diagnosis is not None and metric.diagnosis.classes == (PER_PROCESS,), metric.reason


def test_a_constant_rate_under_a_declared_schedule_fails():
    trace, _ = _train(kind="constant")
    result = _judge(trace, kind="linear")
    assert (not result.passed) and _metric(result, RATE).diagnosis is None, result.message


def test_a_logged_rate_off_the_schedule_fails():
    trace, logged = _train()
    wrong = [(n + 1, lr * 2 + BASE) for n, lr in enumerate(logged)]
    result = _judge(trace, wrong)
    assert (not result.passed) and _metric(result, LOGGED).status is MetricStatus.FAIL, result.message


def test_a_run_without_steps_or_of_another_length_fails_loudly():
    result = _judge(GradTrace())
    assert (not result.passed) and "0 optimizer steps" in result.message
    trace, _ = _train()
    result = _judge(trace, steps=STEPS + 1)
    assert (not result.passed) and f"{STEPS} optimizer steps, the schedule's run {STEPS + 1}" in result.message
    result = _judge(trace, logs=None)
    assert result.passed and "logs no learning rate" in result.message


def test_a_schedule_the_oracle_does_not_know_is_a_usage_error():
    with pytest.raises(HarnessConfigError, match="lr_scheduler_type='polynomial'"):
        Schedule("polynomial", BASE, 0, 4)
