"""`logp_gradient[run=delta]`: the gradient of the clipped loss with TRL's `delta`, the ratio's upper cap."""

from __future__ import annotations

from harness.algorithms import case
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import ObservationCache


def test_the_reference_passes_with_capped_tokens_and_a_cap_left_out_fails():
    from harness.algorithms.grpo.targets.reference import factory

    result = case("logp_gradient[run=delta]", "grpo").run(ObservationCache(factory), GRPOSpec())
    assert result.passed and "capped by delta" in result.message, result.message

    def uncapped(spec, accelerator=None):
        run = factory(spec, accelerator)
        module, train = run.module, run.train
        original = module.clipped_objective

        def clipped_objective(logps, old, advantages, epsilon_low, epsilon_high, delta):
            return original(logps, old, advantages, epsilon_low, epsilon_high, None)  # delta left out

        def patched_train():
            module.clipped_objective = clipped_objective
            try:
                return train()
            finally:
                module.clipped_objective = original

        run.train = patched_train
        return run

    uncapped.algorithm = "grpo"
    result = case("logp_gradient[run=delta]", "grpo").run(ObservationCache(uncapped), GRPOSpec())
    assert not result.passed and "gradient/logp_relative" in result.message, result.message
