"""Targets for the gate's own tests: broken trainers and broken adapters (imported by `--target`)."""

from __future__ import annotations

import types

from harness.targets.reference import factory as reference_factory


def mean_of_means(spec):
    """Bug class 1: every pooled metric is the mean of per-micro-batch means (equal weight per micro-batch)."""
    run = reference_factory(spec)
    module = run.module
    fields = module.STAT_FIELDS
    r_count, v_count = fields.index("count/response"), fields.index("count/value")

    def pooled_stats(rows):
        rows = rows.clone()
        for name in module.RESPONSE_POOLED + module.VALUE_POOLED:
            count = rows[:, r_count] if name in module.RESPONSE_POOLED else rows[:, v_count]
            rows[:, fields.index(name)] /= count.clamp(min=1)
        rows[:, r_count] = 1.0
        rows[:, v_count] = 1.0
        return original(rows)

    original = module.pooled_stats
    trainer = run.trainer
    train = run.train

    def patched_train():
        module.pooled_stats = pooled_stats
        try:
            return train()
        finally:
            module.pooled_stats = original

    run.train = patched_train
    del trainer
    return run


def no_spy_functions(spec):
    """An adapter whose trainer module has neither masked_mean nor selective_log_softmax."""
    run = reference_factory(spec)
    run.module = types.ModuleType("trainer_without_spied_functions")
    return run


def not_a_run(spec):
    """An adapter that returns something that is not a TargetRun."""
    return object()
