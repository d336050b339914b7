"""Live mode (harness/live/): the check of a run's logging intervals while it trains.

TRL's GRPOTrainer on the toy world, with `LiveCheck` added in one line, is flagged with class 16 (its flat mean
of micro-batch means), and names it; the reference GRPO trainer under `live_reference` passes; a live-checked
run's logged metrics, weights and gradients equal those of the same run without the check.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch

from harness.algorithms.grpo.oracle.expect import Settings
from harness.algorithms.grpo.runs import across_generations_spec, off_policy_mask_spec
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.loss import LossRecord
from harness.live import check_interval, expected_key, live_reference, merge_ranks
from harness.live.interval import PASS_KEY, gap_key, pass_key
from tests.harness.live import runs
from tests.harness.live.runs import TIMINGS, train_trl

SPEC = GRPOSpec(max_steps=4, gradient_accumulation_steps=2, logging_steps=1, beta=0.04)
"""Two micro-batches of uneven lengths per logged interval, four intervals."""


def trl_run(spec=SPEC, extra=None):
    return runs.trl_run(spec, extra)


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
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_trl_at_its_bf16_default_is_flagged_with_class_16(loss_type, caplog):
    """GRPOConfig's precision default, bf16=True over float32 weights: TRL's per-token values stay float32, the
    tolerances derived from them are float32's, and the flat mean of micro-batch means fails, named class 16
    (under the bfloat16 row it passed: 2 % of an entropy, 5e-3 of a kl)."""
    from harness.live import LiveCheck

    run = trl_run(GRPOSpec(max_steps=3, gradient_accumulation_steps=2, logging_steps=1, beta=0.04,
                           loss_type=loss_type, dtype="bfloat16"))  # fmt: skip
    assert run.trainer.args.bf16 and next(run.trainer.model.parameters()).dtype == torch.float32
    live = LiveCheck(every=1)
    run.trainer.add_callback(live)
    with caplog.at_level(logging.INFO, logger="harness.live"):
        train_trl(run)
    assert live.summary.failed >= 1 and 16 in live.summary.classes
    entropy = [v for r in live.results for v in r.verdicts if v.name == "entropy" and v.failed]
    assert entropy and all(v.diagnosis is not None and v.diagnosis.classes == (16,) for v in entropy)
    assert all(v.precision.dtype == "float32" and v.tol < 1e-4 for v in entropy)


@pytest.mark.trl
def test_trl_flat_mean_is_flagged_with_class_16(tmp_path, caplog):
    from harness.live import LiveCheck

    run = trl_run()
    live = LiveCheck(every=2, report_dir=tmp_path, logit_gaps=True)
    run.trainer.add_callback(live)  # the one line a user adds
    with caplog.at_level(logging.INFO, logger="harness.live"):
        logs = train_trl(run)
    assert [r.log for r in live.results] == [1, 3]  # logs count from 1: first=1, every=2
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
    said = [r.getMessage() for r in caplog.records]
    (armed,) = [line for line in said if line.startswith("live check armed")]
    assert "one logging interval in 2 (logs 1, 3, 5, ...)" in armed and "float32" in armed and str(tmp_path) in armed
    assert [line.split(":")[0] for line in said if line.startswith("live check log")] == [
        "live check log 1 (step 1)",
        "live check log 3 (step 3)",
    ]  # one line per checked interval
    # the verdict sits next to the logged values, in the logs callbacks and trackers see, at checked logs only
    assert logs[0][expected_key("entropy")] == pytest.approx(entropy.expected)
    assert logs[0][gap_key("entropy")] == pytest.approx(abs(logs[0]["entropy"] - entropy.expected))
    assert logs[0][pass_key("entropy")] == 0.0 and logs[0][pass_key("clip_ratio/low_mean")] == 1.0
    assert logs[0][PASS_KEY] == 0.0
    assert not any(k.startswith("live/") for k in logs[1])
    history = [h for h in run.trainer.state.log_history if "entropy" in h]
    assert expected_key("entropy") in history[0] and expected_key("entropy") not in history[1]
    assert history[0][PASS_KEY] == 0.0
    report = json.loads((tmp_path / "log-0001.json").read_text())
    assert report["log"] == 1 and report["status"] == "fail" and report["classes"][0] == 16
    assert {m["name"] for m in report["metrics"]} >= {"entropy", "kl", "clip_ratio/low_mean"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["checked"] == 2 and summary["failed"] == 2 and summary["logs"] == [1, 3]
    assert summary["failed_logs"] == [1, 3] and summary["unchecked_logs"] == []
    # nothing of the trainer stays wrapped
    assert "_compute_loss" not in vars(run.trainer) and "on_log" not in vars(run.trainer.callback_handler)


@pytest.mark.trl
def test_trl_raise_option_ends_the_run_through_the_trainers_control(caplog):
    """raise_on_failure ends the run after the failing step as transformers ends a run: the trainer saves its
    checkpoint, every callback's on_train_end runs, train() returns; then raise_if_failed() raises."""
    from transformers import TrainerCallback

    from harness.live import LiveCheck, LiveCheckFailed

    run = trl_run(extra={"save_strategy": "steps", "save_steps": 100})
    ended = []

    class Ended(TrainerCallback):
        def on_train_end(self, args, state, control, **kwargs):
            ended.append(state.global_step)

    live = LiveCheck(every=1, raise_on_failure=True)
    run.trainer.add_callback(live)
    run.trainer.add_callback(Ended())
    with caplog.at_level(logging.INFO, logger="harness.live"):
        logs = train_trl(run)  # returns: no exception in the trainer's loop
    assert len(logs) == 1 and ended == [1] and run.trainer.state.global_step == 1
    assert live.failed and live.summary.stopped_at_log == 1 and live.summary.checked == 1
    output = Path(run.trainer.args.output_dir)
    assert (output / "checkpoint-1").is_dir()  # the last checkpoint, written by the trainer's save
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["live check log 1 (step 1) failed: ending the run after this step (raise_on_failure=True)"]
    with pytest.raises(LiveCheckFailed, match="class 16"):
        live.raise_if_failed()
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


ACROSS = across_generations_spec(GRPOSpec())
"""dapo in windows of 3 micro-batches over generations of 2, each window running on into the next generation, one
log after both windows: its interval holds three whole generations, so the records count each one's tokens (an
interval that began or ended inside a generation could not, and names the gradient not checked)."""

OFF_POLICY_MASK = off_policy_mask_spec(GRPOSpec())
"""The extremes run under TRL's off-policy sequence mask (threshold 2.0): one log after two passes over a
generation, the second far off policy, so the mask drops some completions' policy terms, which the live oracle's
settings carry (the pooled policy_loss and each token's gradient)."""


@pytest.mark.parametrize("spec", [SPEC, ACROSS, OFF_POLICY_MASK],
                         ids=["uneven", "across_generations", "off_policy_mask"])  # fmt: skip
def test_reference_passes(spec, tmp_path):
    from harness.algorithms.grpo.targets.reference import factory

    run = factory(spec)
    with live_reference(run.trainer, every=1, report_dir=tmp_path) as live:
        history = run.trainer.train()
    assert live.summary.checked == spec.total_logs and live.summary.failed == 0, live.summary.line()
    assert all(expected_key("entropy") in m for m in history)
    names = {"entropy", "kl", "policy_loss", "logit_gap/logps", "gradient/logp_relative"}
    assert {v.name for v in live.results[0].verdicts} >= names
    assert not any(k.startswith("live/logit_gap") for m in history for k in m)
    assert all(m[PASS_KEY] == 1.0 and m[pass_key("entropy")] == 1.0 for m in history)
    assert "micro_step" not in vars(run.trainer) and "window_step" not in vars(run.trainer)
    assert sorted(p.name for p in tmp_path.glob("log-*.json")) == [f"log-{i:04d}.json" for i in
                                                                   range(1, spec.total_logs + 1)]  # fmt: skip


def test_a_window_divided_by_its_first_generations_tokens_fails_live(monkeypatch):
    """The reference with class 94 patched in (dapo's count of every micro-batch of a window taken from the window's
    first, as a trainer that counts once per optimizer step does): each live interval holds a window across two
    generations, and the check fails it there."""
    from harness.algorithms.grpo.targets.reference import factory
    from reference_trainers import grpo

    counted, real = [], grpo.loss_denominator
    window = ACROSS.gradient_accumulation_steps

    def first_generations(loss_type, counts, max_completion_length):
        counted.append(counts)
        first = counted[(len(counted) - 1) // window * window]  # every window here holds `window` micro-batches
        return real(loss_type, dataclasses.replace(counts, generation_tokens=first.generation_tokens),
                    max_completion_length)  # fmt: skip

    monkeypatch.setattr(grpo, "loss_denominator", first_generations)
    run = factory(ACROSS)
    with live_reference(run.trainer, every=1) as live:
        run.trainer.train()
    assert len(counted) == window * ACROSS.max_steps
    assert any(a.generation_tokens != b.generation_tokens for a, b in zip(counted, counted[1:]))  # two generations
    assert live.summary.checked == ACROSS.total_logs and live.summary.failed == ACROSS.total_logs, live.summary.line()
    failed = {v.name for result in live.results for v in result.verdicts if not v.passed}
    assert failed == {"gradient/logp_relative"}, failed


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

    session = LiveSession(every=20)  # logs 1, 21, 41, 61: the 0-based interval indexes 0, 20, 40, 60
    assert [i for i in range(61) if session.sampled(i)] == [0, 20, 40, 60]
    later = LiveSession(every=3, first=3, max_intervals=2)
    assert [i + 1 for i in range(12) if later.sampled(i)] == [3, 6, 9, 12]  # max_intervals counts checked ones
    with pytest.raises(ValueError):
        LiveSession(every=0)
