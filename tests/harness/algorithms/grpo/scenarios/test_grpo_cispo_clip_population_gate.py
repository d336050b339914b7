"""The reference GRPO trainer counts cispo's clipped tokens as TRL does, those capped with a positive advantage (the
contract's cispo_clip_population): declaring verl's population, every capped token, on it fails the pooled
cispo_clip_ratio and names the trl profile as what its number is; every other metric of the check passes as before."""

from __future__ import annotations

from tests.harness.algorithms.grpo.scenarios.test_grpo_declared_loss_gate import formula, judged

CHECK = "uneven_lengths[loss_type=cispo]"


def test_every_capped_token_declared_on_a_trainer_that_counts_positive_advantages_fails_by_name():
    assert judged(CHECK, "trl").passed
    result = judged(CHECK, {"cispo_clip_population": "any_advantage"})
    assert {m.name for m in result.metrics if m.failed} == {"cispo_clip_ratio"}
    assert formula(result, "cispo_clip_ratio").startswith("cispo_clip_population positive_advantage (the trl profile's)"
                                                          ", where the target declares cispo_clip_population "
                                                          "any_advantage")  # fmt: skip
