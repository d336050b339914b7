"""`logp_gradient[run=delta]`: the gradient of the clipped loss with TRL's `delta`, the ratio's upper cap.

Run as a user runs the one check (`python -m harness verify --check ...`), each in a process of its own: the
case needs the run's ratios to pass the cap, which a run in a test worker that many other tests have used
did not always show.
"""

from __future__ import annotations

import pytest

from tests.support.gate_run import verify

CHECK = "logp_gradient[run=delta]"


def uncapped(spec, accelerator=None):
    """The reference GRPO trainer with delta left out of its clipped objective while it trains."""
    from harness.algorithms.grpo.targets.reference import factory

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


@pytest.mark.slow  # gate processes: the full tier
def test_the_reference_passes_with_capped_tokens_and_a_cap_left_out_fails(tmp_path):
    code, report, output = verify(tmp_path / "reference", "--target", "reference-grpo", "--check", CHECK)
    (check,) = report["checks"]
    assert code == 0 and "capped by delta" in check["message"], output[-2000:]
    code, report, output = verify(
        tmp_path / "uncapped", "--target", "tests.harness.algorithms.grpo.scenarios.test_grpo_delta:uncapped",
        "--check", CHECK,
    )
    (check,) = report["checks"]
    assert code == 1 and check["status"] == "fail" and "gradient/logp_relative" in check["message"], output[-2000:]
