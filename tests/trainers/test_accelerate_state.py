"""The reference trainers step wherever another Accelerator's run left accelerate's process-wide state.

accelerate keeps one `GradientState` per process, shared by every Accelerator, and a prepared optimizer steps
only while its `sync_gradients` says an accumulation window ended. TRL 1.12.0's PPOTrainer, run in a process,
leaves it False (a window its loop never closed); a reference trainer built after it in the same process
then skipped every optimizer step until it set the flag itself (each window it accumulates is its own).
"""

from __future__ import annotations

import pytest
import torch
from accelerate.state import GradientState

from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.ppo.spec import ScenarioSpec


@pytest.fixture
def window_left_open():
    """accelerate's shared state as a run stopped mid-window leaves it; the default put back after the test."""
    state = GradientState()
    state._set_sync_gradients(False)
    yield
    state._set_sync_gradients(True)


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_a_trainer_built_after_a_window_left_open_still_steps(window_left_open, algorithm):
    if algorithm == "ppo":
        from harness.algorithms.ppo.targets.reference import factory

        spec = ScenarioSpec(learning_rate=1e-3)
    else:
        from harness.algorithms.grpo.targets.reference import factory

        spec = GRPOSpec(learning_rate=1e-3)
    assert not GradientState().sync_gradients
    run = factory(spec)
    before = [p.detach().clone() for p in run.params]
    steps = []
    run.optimizer.register_step_post_hook(lambda *args: steps.append(1))
    run.train()
    assert steps, "the prepared optimizer never stepped"
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, run.params)), "no weight moved"
