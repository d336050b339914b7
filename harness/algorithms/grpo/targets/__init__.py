"""GRPO's built-in targets; the only GRPO modules allowed to import a trainer (reference_trainers, trl).

They are named, by `module:factory`, in `harness.algorithms.grpo.algorithm` (`TARGETS`).
"""
