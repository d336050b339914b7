"""What runs while the trainer runs: the spy, the gradient recorder, and `observe()` around a target's run.

Algorithm-neutral; torch is imported where it is used.
"""
