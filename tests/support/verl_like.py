"""Targets of a GRPO trainer that adds verl's 1e-6 to the reward std an advantage is divided by (verl's
compute_grpo_outcome_advantage), where TRL adds 1e-4: the reference GRPO trainer with that one constant changed while
it trains, declaring verl's definitions (`declaring`), declaring none (`undeclared`), and the reference trainer itself
declaring verl's (`misdeclared`: its 1e-4 broken against the declaration)."""

from __future__ import annotations

VERL_EPSILON = 1e-6


def _with_epsilon(run, epsilon: float):
    """`run` whose `train()` runs with the trainer module's advantage epsilon set to `epsilon` (and put back)."""
    from reference_trainers import grpo

    train = run.train

    def patched():
        kept = grpo.STD_EPS
        grpo.STD_EPS = epsilon
        try:
            return train()
        finally:
            grpo.STD_EPS = kept

    run.train = patched
    return run


def undeclared(spec):
    """The reference GRPO run of `spec`, with verl's advantage epsilon, declaring nothing (held to TRL's)."""
    from harness.targets import resolve

    return _with_epsilon(resolve("reference-grpo").factory(spec), VERL_EPSILON)


undeclared.algorithm = "grpo"


def declaring(spec):
    """`undeclared`, declaring verl's definitions."""
    return undeclared(spec)


declaring.algorithm = "grpo"
declaring.definitions = "verl"


def misdeclared(spec):
    """The reference GRPO trainer (TRL's 1e-4), declaring verl's definitions."""
    from harness.targets import resolve

    return resolve("reference-grpo").factory(spec)


misdeclared.algorithm = "grpo"
misdeclared.definitions = {"profile": "verl"}
