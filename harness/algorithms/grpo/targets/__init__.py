"""GRPO's built-in targets; the only GRPO modules allowed to import a trainer (reference_ppo, trl)."""

TARGETS = {
    "reference-grpo": "harness.algorithms.grpo.targets.reference:factory",
    "trl-grpo": "harness.algorithms.grpo.targets.trl:build",
}
