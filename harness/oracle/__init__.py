"""The oracle's algorithm-neutral building blocks, in float64, from recorded tensors alone.

Nothing here imports a trainer or calls a target's code: masks are derived from response
ids, rows are paired by what was recorded, and pooled values are sums and counts divided
once. Each algorithm (`harness.algorithms.<name>`) builds its expectations from these.
"""
