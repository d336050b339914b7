"""verify-dist targets whose trainer implements another published definition and leaves a metric out of its logs:
the reference GRPO trainer with verl's advantage epsilon (1e-6, where TRL adds 1e-4) and no `clip_ratio/low_min` in
any log, declaring both (`declaring`) or neither (`undeclared`)."""

from __future__ import annotations

from tests.support.unlogged_doubles import without
from tests.support.verl_like import VERL_EPSILON, _with_epsilon

DROPPED = "clip_ratio/low_min"


def undeclared(spec, accelerator=None):
    """The reference GRPO run of `spec` on this rank, with verl's advantage epsilon, its logs without DROPPED."""
    from harness.algorithms.grpo.targets.reference import factory

    return _with_epsilon(without(lambda s: factory(s, accelerator), DROPPED)(spec), VERL_EPSILON)


undeclared.algorithm = "grpo"


def declaring(spec, accelerator=None):
    """`undeclared`, declaring the epsilon it adds and the metric it does not log."""
    return undeclared(spec, accelerator)


declaring.algorithm = "grpo"
declaring.definitions = {"advantage_epsilon": VERL_EPSILON}
declaring.unlogged_metrics = (DROPPED,)
