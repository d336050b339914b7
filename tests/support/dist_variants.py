"""Deliberately broken reference trainers for the multi-process tests (imported by the worker ranks)."""

from __future__ import annotations

import time
import types

from harness.algorithms.ppo.targets.reference import factory as reference_factory


def per_rank_mean(spec):
    """Bug class 9: each rank pools its own micro-batches, then the ranks' means are averaged."""
    run = reference_factory(spec)
    trainer = run.trainer
    module = run.module

    def train_one_update(self):
        self.model.train()
        rollout, per_sample = self.rollout()
        stats = self.optimise(rollout)
        local = module.pooled_stats(stats)  # this rank's micro-batches only
        names = sorted(local)
        values = __import__("torch").tensor([local[n] for n in names], dtype=__import__("torch").float64)
        averaged = self.accelerator.reduce(values.to(self.accelerator.device), reduction="mean")
        metrics = dict(zip(names, averaged.tolist()))
        metrics.update(module.rollout_objectives(self.accelerator.gather(per_sample.double())))
        self.log(metrics)
        self.update += 1
        return metrics

    trainer.train_one_update = types.MethodType(train_one_update, trainer)
    return run


def hangs(spec):
    """A trainer whose run never finishes (a stuck collective, say)."""
    run = reference_factory(spec)
    run.train = lambda: time.sleep(3600)
    return run


def rank_one_raises(spec):
    """A trainer that raises on one rank only, while the other waits in a collective."""
    import os

    run = reference_factory(spec)
    if os.environ.get("RANK") == "1":

        def train():
            raise RuntimeError("rank 1 broke down")

        run.train = train
    return run


for _factory in (per_rank_mean, hangs, rank_one_raises):
    _factory.algorithm = "ppo"  # a target names its algorithm: the gate never guesses it
