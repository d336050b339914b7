"""The PPO gate's scenarios, one module per family, and the one registry of them: SCENARIOS.

pooled (the logged statistics per update, the rollout objectives, the training signal, sampling and the
settings sweep), gradients (the gradient at the log-probs and values and the step's), partitions (drawn splits
of one rollout), forward (the log-probs and values recomputed from the networks), schedule (the rollout rows each
epoch's minibatches trained on); preconditions holds what
every scenario checks before it compares (the run finished, one log per update, every metric finite, the
records the view needs). A new check goes in its family's module and into its family's tuple; this module adds
the optimizer step, which any algorithm runs.
"""

from __future__ import annotations

from harness.checks.optimizer import optimizer_scenario
from harness.scenario import Scenario

from ..runs import UNEVEN, spec_for
from .forward import FORWARD_SCENARIOS
from .gradients import GRADIENT_SCENARIOS
from .pooled import POOLED_SCENARIOS
from .schedule import SCHEDULE_SCENARIOS

OPTIMIZER = optimizer_scenario(
    lambda run: spec_for(UNEVEN, run).with_(num_ppo_epochs=2), "the uneven split, two epochs", spy=True
)
"""`optimizer_step` on the uneven split's run with two epochs."""

SCENARIOS: tuple[Scenario, ...] = (
    *POOLED_SCENARIOS,
    *GRADIENT_SCENARIOS,
    *FORWARD_SCENARIOS,
    *SCHEDULE_SCENARIOS,
    OPTIMIZER,
)
"""Every PPO scenario, in the order the gate runs and reports them."""
