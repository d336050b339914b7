"""The reference targets hand the gate what their trainer logged (callbacks, trackers), checked channel by channel."""

from __future__ import annotations

import math

import pytest

from harness.algorithms.grpo.targets.reference import log_steps
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.instrument.observe import ObservationCache
from harness.targets.logged import LoggedWrong, LogTap


def _tap(called, tracked=None, main=True) -> LogTap:
    tap = LogTap()
    tap.called = list(called)
    tap.tracked = list(called if tracked is None else tracked)
    tap.tracking = main
    return tap


def test_the_logged_metrics_come_back_when_every_channel_agrees():
    log = [(0, {"a": 1.0}), (1, {"a": math.nan})]
    assert _tap(log).logged([{"a": 1.0}, {"a": math.nan}], steps=range(2)) == [m for _, m in log]


@pytest.mark.parametrize(
    "called, steps, message",
    [
        ([(0, {"a": 1.0}), (0, {"a": 2.0})], range(2), r"callbacks got steps \[0, 0\]"),
        ([(None, {"a": 1.0})], range(1), r"callbacks got steps \[None\]"),
        ([(1, {"a": 1.0})], range(1), r"its schedule logs at \[0\]"),
        ([], range(1), r"callbacks got steps \[\]"),
    ],
)
def test_steps_off_the_schedule_are_a_trainer_failure(called, steps, message):
    with pytest.raises(LoggedWrong, match=message):
        _tap(called).logged([m for _, m in called], steps=steps)


def test_trackers_that_got_other_numbers_or_nothing_are_a_trainer_failure():
    called = [(0, {"a": 1.0, "b": 2.0})]
    with pytest.raises(LoggedWrong, match="trackers and the callbacks.*b differ"):
        _tap(called, tracked=[(0, {"a": 1.0, "b": 3.0})]).logged([{"a": 1.0, "b": 2.0}], steps=[0])
    with pytest.raises(LoggedWrong, match="0 entries against 1"):
        _tap(called, tracked=[]).logged([{"a": 1.0, "b": 2.0}], steps=[0])
    with pytest.raises(LoggedWrong, match="step None against 0"):
        _tap(called, tracked=[(None, {"a": 1.0, "b": 2.0})]).logged([{"a": 1.0, "b": 2.0}], steps=[0])
    # off the main process accelerate logs nothing: only the callbacks are compared
    assert _tap(called, tracked=[], main=False).logged([{"a": 1.0, "b": 2.0}], steps=[0]) == [{"a": 1.0, "b": 2.0}]


def test_a_return_value_that_is_not_what_was_logged_is_a_trainer_failure():
    with pytest.raises(LoggedWrong, match="returned other metrics"):
        _tap([(0, {"a": 1.0})]).logged([{"a": 1.5}], steps=[0])


def test_grpo_logs_every_logging_steps_and_at_a_partial_last_interval():
    assert log_steps(4, 2) == (2, 4)
    assert log_steps(3, 2) == (2, 3)
    assert log_steps(2, 1) == (1, 2)


def _crash_of(factory, spec):
    observation = ObservationCache(factory).get(spec, spy=False)
    assert observation.ran is None, "the run should have failed"
    return observation.error


@pytest.mark.parametrize(
    "broken_log, message",
    [
        ("callback(metrics, None)", "callbacks got steps [None, None]"),
        ("callback(metrics, self.update + 1)", "callbacks got steps [1, 2]"),
        ("accelerator.log(metrics)", "trackers and the callbacks"),
        ("nothing", "callbacks got steps []"),
    ],
)
def test_the_reference_trainer_with_broken_logging_fails_its_run(monkeypatch, broken_log, message):
    """What a user's callback or tracker sees is what the gate checks: a trainer logging it wrong fails."""
    from harness.algorithms.ppo.targets.reference import factory
    from reference_trainers import ppo as trainer

    def log(self, metrics):
        self.history.append(metrics)
        if broken_log == "accelerator.log(metrics)":
            for callback in self.callbacks:
                callback(metrics, self.update)
            self.accelerator.log(metrics)
        elif broken_log != "nothing":
            for callback in self.callbacks:
                callback(metrics, None if "None" in broken_log else self.update + 1)

    monkeypatch.setattr(trainer.PPOTrainer, "log", log)
    error = _crash_of(factory, ScenarioSpec(total_updates=2))
    assert "LoggedWrong" in error and message in error
