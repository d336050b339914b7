"""GRPO per-token values against their formulas (logit_gaps, logit_recompute) and the GRPO diagnosis."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from harness.algorithms.grpo import runs
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle.expect import intervals
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.logits import LogitGaps, entropy_f64, logps_f64
from harness.instrument.observe import Observation
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, grpo_check, ran


def log_softmax_f32(logits, index):
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def entropy_f32(logits):
    logits = logits.float()
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def test_the_float64_formulas_and_the_gaps_of_a_correct_and_a_wrong_entropy():
    gen = torch.Generator().manual_seed(0)
    raw = torch.randn(9, 5, 32, generator=gen) * 3
    index = torch.randint(0, 32, (9, 5), generator=gen)
    uniform = torch.zeros(2, 3, 32)
    assert torch.allclose(entropy_f64(uniform), torch.full((2, 3), math.log(32), dtype=torch.float64))
    assert torch.allclose(logps_f64(uniform, torch.zeros(2, 3, dtype=torch.long)), torch.tensor(-math.log(32)).double())

    right = LogitGaps()
    log_softmax, entropy = right.wrap(log_softmax_f32, entropy_f32)
    scaled = raw / 0.7
    assert torch.equal(log_softmax(scaled, index), log_softmax_f32(scaled, index))  # results handed on unchanged
    entropy(scaled)
    assert right.gaps()["logps"] < 1e-5 and right.gaps()["entropies"] < 1e-5

    wrong = LogitGaps()  # the entropy of the logits before the temperature (class 20)
    log_softmax, entropy = wrong.wrap(log_softmax_f32, lambda logits: entropy_f32(logits * 0.7))
    log_softmax(scaled, index)
    entropy(scaled)
    assert wrong.gaps()["logps"] < 1e-5 and wrong.gaps()["entropies"] > 1e-2
    assert LogitGaps().gaps() == {"logps": None, "entropies": None}


@pytest.fixture(scope="module")
def logits_obs():
    cache = reference("grpo")
    spec = runs.spec_for(runs.LOGITS, GRPOSpec()).with_(temperature=0.7)
    return cache, cache.get(spec, spy=False)


def test_the_reference_passes_logit_recompute_and_broken_gaps_fail_it(logits_obs):
    cache, obs = logits_obs
    assert obs.spec.temperature == 0.7
    assert grpo_check("logit_recompute", cache).passed
    for gaps, why in (
        (None, "has no logit_gaps"),
        ({"entropies": None}, "entropies function was not called"),
        ({"entropies": 0.05}, "logit_gap/entropies"),
        ({"logps": math.nan}, "logit_gap/logps"),
    ):
        records = list(recorded(obs.ran).loss_inputs)
        changed = None if gaps is None else dataclasses.replace(records[1].logit_gaps, **gaps)
        records[1] = dataclasses.replace(records[1], logit_gaps=changed)
        broken = Observation(obs.spec, ran(obs.ran.logs, records))
        result = grpo_check("logit_recompute", FixedCache(lambda spec, b=broken: b))
        assert not result.passed and why in result.message, result.message


def test_a_flat_mean_of_micro_batch_means_is_diagnosed_as_class_16():
    cache = reference("grpo")
    obs = cache.get(runs.spec_for(runs.UNEVEN, GRPOSpec()), spy=False)
    logs = [dict(log) for log in obs.ran.logs]
    for index, records in enumerate(intervals(recorded(obs.ran).loss_inputs, obs.spec)):
        means = [float((r.entropies * r.completion_mask).sum() / r.completion_mask.sum()) for r in records]
        logs[index]["entropy"] = sum(means) / len(means)
    broken = Observation(obs.spec, ran(logs, recorded(obs.ran).loss_inputs))
    result = grpo_check("uneven_lengths[loss_type=dapo]", FixedCache(lambda spec: broken))
    failing = [m for m in result.metrics if m.failed]
    assert failing and all(m.name == "entropy" for m in failing)
    assert all(m.diagnosis is not None and m.diagnosis.classes == (16,) for m in failing), failing
