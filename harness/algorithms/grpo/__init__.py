"""GRPO: its contract (docs/grpo-metrics.md), spec, expectations, scenarios and targets.

Kept light on purpose (no torch here): `algorithm.GRPO` is the registered object.
"""
