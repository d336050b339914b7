"""Targets as they were written for an earlier release, frozen: the gate of today must judge them fairly.

`grpo010` is release 0.1.0's reference GRPO trainer and its target (reference_trainers/grpo.py and
harness/algorithms/grpo/targets/reference.py as tagged v0.1.0), moved into one package: its own imports are
made relative, and the factory names its algorithm (`factory.algorithm = "grpo"`), as a GRPO target outside the
project had to at 0.1.0. Nothing else is changed: not a definition, not a call into the harness.
"""
