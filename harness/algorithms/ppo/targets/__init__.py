"""PPO's built-in targets; the only PPO modules allowed to import a trainer (reference_ppo, trl)."""

TARGETS = {
    "reference": "harness.algorithms.ppo.targets.reference:factory",
    "trl": "harness.algorithms.ppo.targets.trl:factory",
}
TARGETS_WITH_ARGUMENT = {
    "trl": "harness.algorithms.ppo.targets.trl:factory_for",
}
"""`NAME:ARGUMENT` targets: a function of ARGUMENT that returns the factory (`trl:my_pkg.ppo_trainer`)."""
