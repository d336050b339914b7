"""GRPO's built-in targets; the only GRPO modules allowed to import a trainer (reference_ppo, trl).

They are named, by `module:factory`, in `harness.algorithms.grpo.algorithm` (`TARGETS`).
"""
