"""Live mode (harness/live/): the check of a run's logging intervals while it trains.

TRL's GRPOTrainer on the toy world, with `LiveCheck` added in one line, is flagged with class 16 (its flat mean
of micro-batch means), and names it; the reference GRPO trainer under `live_reference` passes; a live-checked
run's logged metrics, weights and gradients equal those of the same run without the check.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from harness.algorithms.grpo.expect import Settings
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.loss import LossRecord
from harness.live import check_interval, expected_key, live_reference, merge_ranks

SPEC = GRPOSpec(max_steps=4, gradient_accumulation_steps=2, logging_steps=1, beta=0.04)
"""Two micro-batches of uneven lengths per logged interval, four intervals."""
TIMINGS = ("step_time",)
"""What TRL logs of the wall clock (seconds per step), the one logged value a run does not repeat."""


def trl_run(spec=SPEC):
    pytest.importorskip("trl")
    pytest.importorskip("trl.trainer.grpo_trainer", reason="TRL's GRPO trainer does not import (it needs `requests`)")
    from harness.algorithms.grpo.targets import trl as trl_grpo

    return trl_grpo.build(spec)


def train_trl(run) -> list[dict]:
    from harness.targets.hf import quiet

    with quiet():
        run.trainer.train()
    return [dict(m) for m in run._metrics]


class Gradients:
    """A callback that keeps a copy of every parameter's gradient just before each optimizer step."""

    def __init__(self, run) -> None:
        from transformers import TrainerCallback

        params = run.params
        self.steps: list[list[torch.Tensor]] = []
        steps = self.steps

        class Keep(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                steps.append([p.grad.detach().clone() if p.grad is not None else None for p in params])

        self.callback = Keep()


@pytest.mark.trl
def test_trl_flat_mean_is_flagged_with_class_16(tmp_path, caplog):
    from harness.live import LiveCheck

    run = trl_run()
    live = LiveCheck(every=2, report_dir=tmp_path, logit_gaps=True)
    run.trainer.add_callback(live)  # the one line a user adds
    with caplog.at_level(logging.WARNING, logger="harness.live"):
        logs = train_trl(run)
    assert [r.interval for r in live.results] == [0, 2]
    assert live.summary.checked == 2 and live.summary.failed == 2
    assert 16 in live.summary.classes
    entropy = {v.name: v for v in live.results[0].verdicts}["entropy"]
    assert entropy.failed and entropy.diagnosis is not None and entropy.diagnosis.classes == (16,)
    gaps = [v for v in live.results[0].verdicts if v.name.startswith("logit_gap/")]
    assert len(gaps) == 2 and all(v.passed for v in gaps)  # TRL computes its log-probs right
    (gradient,) = [v for v in live.results[0].verdicts if v.name == "gradient/logp_relative"]
    assert gradient.passed  # and its gradient at them is the loss type's formula
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("class 16" in line and "entropy" in line for line in warned)
    assert any(line.startswith("live check: 2 interval(s) checked, 0 passed, 2 failed") for line in warned)
    # the expected values sit next to the logged ones, in the logs callbacks and trackers see, at checked logs only
    assert logs[0][expected_key("entropy")] == pytest.approx(entropy.expected)
    assert expected_key("entropy") not in logs[1]
    history = [h for h in run.trainer.state.log_history if "entropy" in h]
    assert expected_key("entropy") in history[0] and expected_key("entropy") not in history[1]
    report = json.loads((tmp_path / "interval-0000.json").read_text())
    assert report["status"] == "fail" and report["classes"][0] == 16
    assert {m["name"] for m in report["metrics"]} >= {"entropy", "kl", "clip_ratio/low_mean"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["checked"] == 2 and summary["failed"] == 2 and summary["intervals"] == [0, 2]
    # nothing of the trainer stays wrapped
    assert "_compute_loss" not in vars(run.trainer) and "on_log" not in vars(run.trainer.callback_handler)


@pytest.mark.trl
def test_trl_raise_option_stops_the_run_unwrapped():
    from harness.live import LiveCheck, LiveCheckFailed

    run = trl_run()
    run.trainer.add_callback(LiveCheck(every=1, raise_on_failure=True))
    with pytest.raises(LiveCheckFailed, match="class 16"):
        train_trl(run)
    assert "_compute_loss" not in vars(run.trainer)
    assert "_get_per_token_logps_and_entropies" not in vars(run.trainer)
    assert "on_log" not in vars(run.trainer.callback_handler)


@pytest.mark.trl
def test_trl_live_check_changes_nothing():
    """Same seeds, same logged metrics, weights and gradients at every step, with and without the live check."""
    from harness.live import LiveCheck

    runs, grads, logs = [], [], []
    for live in (False, True):
        run = trl_run()
        keep = Gradients(run)
        run.trainer.add_callback(keep.callback)
        if live:
            run.trainer.add_callback(LiveCheck(every=1))
        logs.append(train_trl(run))
        runs.append(run)
        grads.append(keep.steps)
    bare, checked = logs
    assert any(expected_key("entropy") in m for m in checked)
    trimmed = [{k: v for k, v in m.items() if not k.startswith("live/")} for m in checked]
    differ = [
        (i, k, a.get(k), b.get(k))
        for i, (a, b) in enumerate(zip(bare, trimmed))
        for k in a.keys() | b.keys()
        if a.get(k) != b.get(k) and k not in TIMINGS
    ]
    assert len(bare) == len(trimmed) == SPEC.total_logs and not differ, differ
    assert len(grads[0]) == len(grads[1]) == SPEC.max_steps
    for step_bare, step_checked in zip(*grads):
        for a, b in zip(step_bare, step_checked):
            assert (a is None and b is None) or torch.equal(a, b)
    for a, b in zip(runs[0].params, runs[1].params):
        assert torch.equal(a, b)


def test_reference_passes(tmp_path):
    from harness.algorithms.grpo.targets.reference import factory

    run = factory(SPEC)
    with live_reference(run.trainer, every=1, report_dir=tmp_path) as live:
        history = run.trainer.train()
    assert live.summary.checked == SPEC.total_logs and live.summary.failed == 0, live.summary.line()
    assert all(expected_key("entropy") in m for m in history)
    names = {"entropy", "kl", "policy_loss", "logit_gap/logps", "gradient/logp_relative"}
    assert {v.name for v in live.results[0].verdicts} >= names
    assert not any(k.startswith("live/logit_gap") for m in history for k in m)
    assert "micro_step" not in vars(run.trainer) and "window_step" not in vars(run.trainer)
    assert len(list(tmp_path.glob("interval-*.json"))) == SPEC.total_logs


def test_reference_live_check_changes_nothing():
    from harness.algorithms.grpo.targets.reference import factory

    histories, weights = [], []
    for live in (False, True):
        run = factory(SPEC)
        if live:
            with live_reference(run.trainer, every=1):
                history = run.trainer.train()
        else:
            history = run.trainer.train()
        histories.append([{k: v for k, v in m.items() if not k.startswith("live/")} for m in history])
        weights.append([p.detach().clone() for p in run.trainer.model.parameters()])
    assert histories[0] == histories[1]
    assert all(torch.equal(a, b) for a, b in zip(*weights))


def _record(mask: list[list[int]], entropy: list[list[float]], rank: int) -> LossRecord:
    m = torch.tensor(mask, dtype=torch.bool)
    zeros = torch.zeros(m.shape, dtype=torch.float64)
    return LossRecord(generation=0, window=0, rank=rank, completion_mask=m, logps=zeros, old_logps=None,
                      ref_logps=None, advantages=torch.zeros(m.shape[0], dtype=torch.float64),
                      entropies=torch.tensor(entropy, dtype=torch.float64))  # fmt: skip


def test_merge_ranks_pools_each_micro_batch_across_ranks():
    """Rank 0's and rank 1's i-th micro-batches become one (rows of both, padded and masked to the longer), so a
    trainer that reduces each micro-batch over the ranks and then averages micro-batches is diagnosed as class 16."""
    settings = Settings.of(GRPOSpec(loss_type="dapo", beta=0.0))
    rank0 = [_record([[1, 1, 1]], [[1.0, 1.0, 1.0]], 0), _record([[1, 0, 0]], [[5.0, 0.0, 0.0]], 0)]
    rank1 = [_record([[1]], [[3.0]], 1), _record([[1, 1]], [[2.0, 2.0]], 1)]
    merged = merge_ranks([rank0, rank1])
    assert [tuple(r.completion_mask.shape) for r in merged] == [(2, 3), (2, 3)]
    assert [int(r.completion_mask.sum()) for r in merged] == [4, 3]
    pooled = (3 * 1.0 + 3.0 + 5.0 + 2 * 2.0) / 7
    flat = ((3 * 1.0 + 3.0) / 4 + (5.0 + 4.0) / 3) / 2
    right = check_interval([rank0, rank1], {"entropy": pooled}, settings, 0, 1)
    assert not right.failed and right.ranks == 2 and right.tokens == 7
    wrong = check_interval([rank0, rank1], {"entropy": flat}, settings, 0, 1)
    (entropy,) = [v for v in wrong.verdicts if v.name == "entropy"]
    assert entropy.failed and entropy.diagnosis is not None and entropy.diagnosis.classes == (16,)


def test_sampling_schedule():
    from harness.live import LiveSession

    session = LiveSession(every=20)
    assert [i for i in range(61) if session.sampled(i)] == [0, 20, 40, 60]
    later = LiveSession(every=3, first=2, max_intervals=2)
    assert [i for i in range(12) if later.sampled(i)] == [2, 5, 8, 11]  # max_intervals counts checked ones
    with pytest.raises(ValueError):
        LiveSession(every=0)
