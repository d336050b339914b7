"""PPO: its contract (docs/metrics.md), spec, view of the records, expectations, scenarios and targets.

Kept light on purpose (no torch here): `algorithm.PPO` is the registered object.
"""
