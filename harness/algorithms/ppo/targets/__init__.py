"""PPO's built-in targets; the only PPO modules allowed to import a trainer (reference_trainers, trl).

They are named, by `module:factory`, in `harness.algorithms.ppo.algorithm` (`TARGETS`).
"""
