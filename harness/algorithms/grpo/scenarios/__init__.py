"""The GRPO gate's scenarios, one module per family, and the one registry of them: SCENARIOS.

pooled (the logged statistics, interval by interval), gradients (the gradient at the log-probs and the step's),
entropy (the gradient at the entropies under an entropy bonus),
rewards (advantages, reward and length statistics, the reward model), reward_inputs (what each reward function
was handed), masks (the completion mask), forward (the log-probs and the sampling recomputed from the networks,
and from the loss's logits),
schedule (the prompts and the counts the configuration implies); preconditions holds what every scenario checks
before it compares (the run finished, a record per micro-batch, every metric logged and finite). A new check
goes in its family's module and into its family's tuple; this module adds the optimizer step, which any
algorithm runs.
"""

from __future__ import annotations

from harness.checks.optimizer import optimizer_scenario
from harness.scenario import Scenario

from ..runs import UNEVEN, spec_for
from .entropy import ENTROPY_SCENARIOS
from .forward import FORWARD_SCENARIOS
from .gradients import GRADIENT_SCENARIOS
from .masks import MASK_SCENARIOS
from .pooled import POOLED_SCENARIOS
from .reward_inputs import REWARD_INPUT_SCENARIOS
from .rewards import REWARD_SCENARIOS
from .schedule import SCHEDULE_SCENARIOS

OPTIMIZER = optimizer_scenario(lambda run: spec_for(UNEVEN, run), "the uneven lengths' two generations")
"""`optimizer_step` on the uneven lengths' two generations (the run `uneven_lengths` makes)."""

SCENARIOS: tuple[Scenario, ...] = (
    *POOLED_SCENARIOS,
    *GRADIENT_SCENARIOS,
    *ENTROPY_SCENARIOS,
    *REWARD_SCENARIOS,
    *REWARD_INPUT_SCENARIOS,
    *MASK_SCENARIOS,
    *FORWARD_SCENARIOS,
    OPTIMIZER,
    *SCHEDULE_SCENARIOS,
)
"""Every GRPO scenario, in the order the gate runs and reports them."""
