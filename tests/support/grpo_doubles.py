"""Doubles for the GRPO gate's tests: hand-made loss records, a finished run, an observed run altered, an
observation cache that hands every spec the same observation, and one check of the GRPO gate run on such a cache."""

from __future__ import annotations

import dataclasses

import torch

from harness.algorithms import case
from harness.algorithms.grpo.instruments import GRPORecords, recorded
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.grad import GradTrace
from harness.instrument.loss import LossRecord
from harness.instrument.observe import Observation, Ran


def record(mask, logps, advantages, old=None, ref=None, entropies=None, window=0):
    """A loss record from nested lists (float64, as the interface says)."""
    mask = torch.tensor(mask, dtype=torch.bool)
    as64 = lambda x: None if x is None else torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return LossRecord(
        generation=0,
        window=window,
        rank=0,
        completion_mask=mask,
        logps=as64(logps),
        old_logps=as64(old),
        ref_logps=as64(ref),
        advantages=as64(advantages),
        entropies=as64(entropies) if entropies is not None else torch.ones(mask.shape, dtype=torch.float64),
    )


class FixedCache:
    """Every spec gets the same observation (with the spec asked for); `target`: the resolved target whose
    declarations the checks read (None: it declares nothing)."""

    def __init__(self, make, target=None):
        self.make, self.target = make, target

    def get(self, spec, spy=True):
        return self.make(spec)

    @classmethod
    def of(cls, obs):
        """The same observation whatever the spec."""
        return cls(lambda spec: obs)


def ran(logs, loss_inputs=None, steps=()):
    return Ran(tuple(logs), GradTrace(steps=tuple(steps)), 0, 2, GRPORecords(loss_inputs=loss_inputs))


RECORDED = {f.name for f in dataclasses.fields(GRPORecords)}


def altered(obs, **changes):
    """`obs` with fields of its run changed: its GRPO record's (`loss_inputs`, `reward_calls`), or the run's own."""
    kept = dataclasses.replace(recorded(obs.ran), **{k: v for k, v in changes.items() if k in RECORDED})
    own = {k: v for k, v in changes.items() if k not in RECORDED}
    return Observation(obs.spec, dataclasses.replace(obs.ran, payload=kept, **own))


def grpo_check(check_id, cache):
    return case(check_id, "grpo").run(cache, GRPOSpec())


def assert_policy_loss_follows(obs: Observation, without: GRPOSpec) -> None:
    """Each interval's logged policy_loss of `obs` is the oracle's under its own spec (a mask of the policy term on,
    say) and at least 1e-4 off the oracle's under `without` (the same records judged with the setting off)."""
    import pytest

    from harness.algorithms.grpo.view import build_view

    records = recorded(obs.ran).loss_inputs
    own, other = build_view(records, obs.spec), build_view(records, without)
    for log, interval, off in zip(obs.ran.logs, own.intervals, other.intervals):
        want = interval.expected["policy_loss"].value
        assert log["policy_loss"] == pytest.approx(want, rel=1e-5, abs=1e-7)
        assert abs(off.expected["policy_loss"].value - want) > 1e-4


def ignoring(obs: Observation, **off) -> Observation:
    """The reference GRPO trainer's run of `obs`'s spec with the settings `off` (a trainer that ignores them), judged
    as `obs`'s run: its spec, the other run's outcome."""
    from tests.support.gates import reference

    return Observation(obs.spec, reference("grpo").get(obs.spec.with_(**off), spy=False).outcome)

