"""The GRPO records: frozen `LossRecord`s and `RewardCall`s, dicts of an external target turned into them when the
observation is made, the harness's `LossRecorder` (its records, and its patches always undone), and the GRPO view
(token terms computed once per interval, for the oracle and the diagnosis alike)."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest
import torch

from harness.algorithms.grpo import view
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.scenarios import pooled as scenarios
from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from harness.instrument.loss import LogitGapRecord, LossRecord, RewardCall, loss_records
from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.observe import Observation, ObservationCache
from tests.support.grpo_doubles import FixedCache, grpo_check, ran, record

# ---------------------------------------------------------------- records, and dicts turned into records


def as_dict(item):
    """A record as an external target hands it: a dict with the record's field names (logit_gaps a dict too)."""
    values = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    if isinstance(values.get("logit_gaps"), LogitGapRecord):
        values["logit_gaps"] = dataclasses.asdict(values["logit_gaps"])
    return values


def test_records_are_frozen_and_dicts_become_records_naming_a_bad_key():
    r = record([[1, 1]], [[0.0, 0.0]], [1.0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.window = 3
    optional = {"logit_gaps", "logp_grad", "completions", "completion_ids"}
    given = {k: v for k, v in as_dict(r).items() if k not in optional}  # the optional keys left out
    (made,) = loss_records([given])
    assert isinstance(made, LossRecord) and made.logp_grad is None and made.completions is None
    assert torch.equal(made.completion_mask, r.completion_mask) and made.old_logps is None
    gapped = loss_records([{**given, "logit_gaps": {"logps": 1e-7, "entropies": None}}])[0]
    assert gapped.logit_gaps == LogitGapRecord(1e-7, None)
    assert loss_records(None) is None and loss_records([r])[0] is r
    lacking = {k: v for k, v in given.items() if k != "advantages"}
    with pytest.raises(HarnessConfigError, match=r"loss_inputs\[1\]: LossRecord lacks the required key 'advantages'"):
        loss_records([given, lacking])
    with pytest.raises(HarnessConfigError, match=r"loss_inputs\[0\]: LossRecord has no field 'logp_grads'"):
        loss_records([{**given, "logp_grads": None}])
    with pytest.raises(HarnessConfigError, match=r"LossRecord.window is 1.5, not an integer"):
        loss_records([{**given, "window": 1.5}])
    with pytest.raises(HarnessConfigError, match="LossRecord.logit_gaps"):
        loss_records([{**given, "logit_gaps": {"logprobs": 0.0}}])
    with pytest.raises(HarnessConfigError, match=r"loss_inputs\[0\] is a list, not a LossRecord or a dict"):
        loss_records([[1, 2]])


class BareRun:
    """A run that trains nothing and hands `loss_inputs` and `reward_calls` as given."""

    def __init__(self, loss_inputs, reward_calls=None):
        self.module = types.ModuleType("bare")
        self.params = [torch.nn.Parameter(torch.zeros(1))]
        self.optimizer = torch.optim.SGD(self.params, lr=0.0)
        self.pad_token_id, self.stop_token_id = 0, 2
        self.loss_inputs, self.reward_calls = loss_inputs, reward_calls

    def train(self):
        return []


def test_observing_a_run_of_dicts_with_a_bad_key_is_a_usage_error():
    good = {k: v for k, v in as_dict(record([[1]], [[0.0]], [1.0])).items() if k != "logit_gaps"}
    obs = ObservationCache(lambda spec: BareRun([good], [as_dict(RewardCall(0, 0, "f", 0, torch.zeros(2)))]))
    kept = recorded(obs.get(GRPOSpec(), spy=False).ran)
    assert isinstance(kept.loss_inputs[0], LossRecord) and isinstance(kept.reward_calls[0], RewardCall)
    for loss_inputs, calls, why in (
        ([{**good, "entropy": None}], None, "LossRecord has no field 'entropy'"),
        ([good], [{"generation": 0, "rank": 0, "function": "f", "scores": torch.zeros(2)}],
         "reward_calls\\[0\\]: RewardCall lacks the required key 'index'"),
    ):  # fmt: skip
        with pytest.raises(HarnessConfigError, match=why):
            ObservationCache(lambda spec, a=loss_inputs, b=calls: BareRun(a, b)).get(GRPOSpec(), spy=False)


def test_an_external_target_handing_dicts_passes_as_before():
    """The reference target's records handed as dicts (docs/architecture.md, "Targets"): the same verdicts."""
    from harness.algorithms.grpo.targets.reference import factory

    class AsDicts:
        def __init__(self, run):
            self._run = run

        def __getattr__(self, name):
            return getattr(self._run, name)

        @property
        def loss_inputs(self):
            return [as_dict(r) for r in self._run.loss_inputs]

        @property
        def reward_calls(self):
            return [as_dict(c) for c in self._run.reward_calls]

    cache = ObservationCache(lambda spec: AsDicts(factory(spec)))
    for check_id in ("uneven_lengths[loss_type=dapo]", "logit_recompute", "logp_gradient[loss_type=dapo]",
                     "advantages[scale_rewards=group]", "completion_lengths"):  # fmt: skip
        result = grpo_check(check_id, cache)
        assert result.passed, (check_id, result.message)


# ---------------------------------------------------------------- the recorder


def _log_softmax(logits, index):
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def _entropy(logits):
    logits = logits.float()
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


class ToyTrainer:
    """A loss entry point that calls its module's two functions, as the reference trainer's micro_step does."""

    def __init__(self, module):
        self.module = module

    def loss(self, logits, index, mask, advantages):
        logps = self.module.selective_log_softmax(logits, index)
        with torch.no_grad():
            self.module.entropy_from_logits(logits)
        return -(logps * advantages.unsqueeze(1) * mask).sum()


def toy():
    module = types.ModuleType("toy_trainer")
    module.selective_log_softmax, module.entropy_from_logits = _log_softmax, _entropy
    trainer = ToyTrainer(module)
    fields = lambda logits, index, mask, advantages: {  # noqa: E731
        "generation": 0, "window": 0, "rank": 0, "completion_mask": mask, "old_logps": None, "ref_logps": None,
        "advantages": advantages, "completion_ids": index, "completions": list(range(len(index))),
    }  # fmt: skip
    return module, trainer, LossRecorder(trainer, "loss", module, fields)


def test_the_recorder_makes_frozen_float64_records_and_undoes_its_patches():
    module, trainer, recorder = toy()
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=gen, requires_grad=True)
    index = torch.randint(0, 11, (3, 5), generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    advantages = torch.tensor([1.0, -2.0, 0.5])
    with recorder:
        assert module.selective_log_softmax is not _log_softmax and "loss" in vars(trainer)
        assert torch.equal(module.selective_log_softmax(logits, index), _log_softmax(logits, index))  # outside a loss
        trainer.loss(logits, index, mask, advantages).backward()
    assert module.selective_log_softmax is _log_softmax and module.entropy_from_logits is _entropy
    assert "loss" not in vars(trainer)
    (r,) = recorder.records
    assert isinstance(r, LossRecord) and r.completion_mask.dtype == torch.bool and r.completion_ids.dtype == torch.int64
    assert r.logps.dtype == r.advantages.dtype == r.entropies.dtype == r.logp_grad.dtype == torch.float64
    assert torch.equal(r.logps, _log_softmax(logits, index).detach().double())
    assert torch.allclose(r.logp_grad, -(advantages.unsqueeze(1) * mask).double())  # d loss / d logps
    assert r.completions.tolist() == [0, 1, 2] and 0 <= r.logit_gaps.logps < 1e-5 and r.logit_gaps.entropies < 1e-5

    def broken(*args):
        raise RuntimeError("boom")

    recorder.around(trainer, "loss", lambda loss: broken)
    with pytest.raises(RuntimeError, match="boom"), recorder:
        trainer.loss(logits, index, mask, advantages)
    assert module.selective_log_softmax is _log_softmax and "loss" not in vars(trainer)
    assert len(recorder.records) == 1


# ---------------------------------------------------------------- the view


def test_the_view_computes_token_terms_once_per_record_for_oracle_and_diagnosis(monkeypatch):
    from harness.algorithms.grpo.targets.reference import factory

    obs = ObservationCache(factory).get(scenarios.spec_for(scenarios.UNEVEN, GRPOSpec()), spy=False)
    logs = [dict(log) for log in obs.ran.logs]
    for log in logs:
        log["entropy"] *= 1.01  # every interval fails entropy: the diagnosis runs too
    broken = Observation(obs.spec, ran(logs, recorded(obs.ran).loss_inputs))
    made = []
    counted = lambda rs, s, terms=view.terms_of: made.extend(rs) or terms(rs, s)  # noqa: E731
    monkeypatch.setattr(view, "terms_of", counted)
    cache = FixedCache(lambda spec: broken)
    for check_id in ("uneven_lengths[loss_type=dapo]", "uneven_lengths[loss_type=dapo]", "freshness"):
        result = grpo_check(check_id, cache)
        assert not result.passed and "entropy @ log 1" in result.message
        assert any(m.diagnosis_reason or m.diagnosis for m in result.metrics if m.failed)
    assert len(made) == len(recorded(obs.ran).loss_inputs) and view.view_of(broken) is view.view_of(broken)


def test_a_nan_gradient_gap_is_the_largest_wherever_it_comes():
    """Intended change: GRPO's largest gap is the core's, which ranks a NaN above every number (it took the plain
    maximum, which drops a NaN that is not first)."""
    from harness.algorithms.grpo.tolerances import TOLERANCES
    from harness.oracle.gradients import largest_gap
    from harness.verdict import Check, CheckId

    check = Check(CheckId("gradient_partition"))
    largest_gap(
        check, [("a", 1e-9), ("b", math.nan), ("c", 1e-8)], "float32", TOLERANCES, none="no gradient was compared"
    )
    result = check.finish()
    assert not result.passed and result.metrics[0].where == "b"
    empty = Check(CheckId("gradient_partition"))
    largest_gap(empty, [], "float32", TOLERANCES, none="no gradient was compared")
    assert "no gradient was compared" in empty.finish().message
