"""Reference PPO trainers for verify-dist's applicability tests (imported by the worker ranks): one whose LR-0 run
cannot be configured, and the same declaring the checks that read that run not applicable."""

from __future__ import annotations

from harness.algorithms.ppo.targets.reference import factory as reference_factory
from harness.errors import HarnessConfigError


def no_lr0(spec):
    """The reference, but a run at learning rate 0 is a configuration error (as a trainer that refuses it)."""
    if spec.learning_rate == 0:
        raise HarnessConfigError("this trainer refuses learning_rate=0")
    return reference_factory(spec)


no_lr0.algorithm = "ppo"


def declares_no_lr0(spec):
    """`no_lr0`, declaring the checks that read the LR-0 run not applicable: that run is never made."""
    return no_lr0(spec)


declares_no_lr0.algorithm = "ppo"
declares_no_lr0.not_applicable = {"lr0_ratio*": "this trainer refuses learning_rate=0",
                                  "logp_gradient*": "this trainer refuses learning_rate=0"}  # fmt: skip
