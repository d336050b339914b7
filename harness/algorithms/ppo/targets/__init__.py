"""PPO's built-in targets; the only PPO modules allowed to import a trainer (reference_ppo, trl)."""

TARGETS = {
    "reference": "harness.algorithms.ppo.targets.reference:factory",
    "trl": "harness.algorithms.ppo.targets.trl:factory",
}
