"""PPO's known wrong formulas, recomputed from the same records as the oracle, so that a failing number that one
of them reproduces is diagnosed by its class (mutants/catalogue/classes.toml): poolings (of the update's
statistics), rollout_poolings (of the rollout objectives)."""
