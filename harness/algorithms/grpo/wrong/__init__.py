"""GRPO's known wrong formulas, recomputed from the same records as the oracle, so that a failing number that
one of them reproduces is diagnosed by its class (mutants/catalogue/classes.toml): poolings (of the logged
statistics), formulas (of rewards and advantages), gradient_formulas (of the gradient at the log-probs)."""
