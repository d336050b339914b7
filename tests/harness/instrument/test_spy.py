"""The spy: call-site naming, faithful copies, entropy, memory, restoring and refusing."""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys
import textwrap
import threading
import types
import weakref
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessConfigError
from harness.instrument import callsite
from harness.instrument.records import LogProbCall, Mark, MaskedMeanCall, OtherCall, Record, Site
from harness.instrument.spy import (
    DEFAULT_FUNCTIONS,
    RECORDERS,
    Spy,
    SpyError,
    recorder_for,
    spy_on,
    token_entropy,
)

SITE_SOURCE = """
import torch


def masked_mean(values, mask, axis=None):
    mask = mask.to(values.dtype)
    if axis is not None:
        return (values * mask).sum(axis) / mask.sum(axis)
    return (values * mask).sum() / mask.sum()


def selective_log_softmax(logits, index):
    return torch.gather(logits.log_softmax(-1), -1, index.unsqueeze(-1)).squeeze(-1)


class Box:
    pass


def pair(x):
    return x, x


def all_forms(v, m):
    plain = masked_mean(v, m)
    scaled = 0.5 * masked_mean(v, m)
    multi_line = masked_mean(
        v,
        m,
    )
    annotated: torch.Tensor = masked_mean(v, m)
    augmented = torch.zeros(())
    augmented += masked_mean(v, m)
    first, second = masked_mean(v, m), 2 * masked_mean(v, m)
    left, right = pair(masked_mean(v, m))
    box = Box()
    box.attribute = masked_mean(v, m)
    stats = {}
    stats["key"] = masked_mean(v, m)
    if (walrus := masked_mean(v, m)) is not None:
        pass
    masked_mean(v, m)
    return masked_mean(v, m)


def keyword_call(v, m):
    per_row = masked_mean(values=v, mask=m, axis=1)
    return per_row


def log_probs(logits, index):
    new_logprobs = selective_log_softmax(logits, index)
    return new_logprobs


def failing(v, m):
    return masked_mean(v, m[:, :2])
"""

FORM_NAMES = [
    "plain",
    "scaled",
    "multi_line",
    "annotated",
    "augmented",
    "first",
    "second",
    "left,right",
    "attribute",
    "stats['key']",
    "walrus",
    None,
    None,
]


def load(tmp_path, source: str, name: str) -> types.ModuleType:
    """Import `source` from a real file, as a trainer module would be."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def mod(tmp_path):
    return load(tmp_path, SITE_SOURCE, f"site_mod_{id(tmp_path)}")


def inputs(rows: int = 3, width: int = 5):
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(rows, width, generator=generator, dtype=torch.float32)
    mask = torch.rand(rows, width, generator=generator) > 0.3
    mask[:, 0] = True
    return values, mask


def test_site_names_for_every_assignment_form(mod):
    values, mask = inputs()
    with Spy(mod) as spy:
        mod.all_forms(values, mask)
    names = [r.site.name for r in spy.records]
    assert names == FORM_NAMES
    assert {r.site.function for r in spy.records} == {"all_forms"}
    assert {r.site.file for r in spy.records} == {mod.__file__}


def test_records_are_detached_cpu_float64_copies(mod):
    values, mask = inputs()
    values.requires_grad_(True)
    with Spy(mod) as spy:
        mod.keyword_call(values, mask)
    (record,) = spy.records
    assert isinstance(record, MaskedMeanCall)
    assert record.fn == "masked_mean" and record.site.name == "per_row"
    assert record.axis == 1 and record.dtype == "float32"
    assert record.values.dtype == torch.float64 and not record.values.requires_grad
    assert record.mask.dtype == torch.bool and torch.equal(record.mask, mask)
    assert torch.equal(record.values, values.detach().double())
    expected = (values * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(record.result, expected.detach().double())
    values.data.add_(1.0)  # a later in-place change of the trainer's tensor does not reach the record
    assert not torch.equal(record.values, values.detach().double())
    with pytest.raises(FrozenInstanceError):  # and nothing downstream can swap a recorded tensor
        record.values = values.detach().double()


def test_wrapper_returns_the_real_result_object():
    result = torch.tensor(0.25)
    module = types.ModuleType("fake_identity")
    module.masked_mean = lambda values, mask, axis=None: result
    with Spy(module, functions=("masked_mean",)) as spy:
        assert module.masked_mean(torch.ones(2), torch.ones(2, dtype=torch.bool)) is result
    assert len(spy.records) == 1 and spy.records[0].result.item() == 0.25


def test_unrecordable_call_is_the_trainers_contract_violation_not_a_configuration_error():
    """A call the contract rules out is the trainer's doing: a failed check (exit 1), not a usage error (exit 2)."""
    from harness.errors import ContractViolation, HarnessConfigError

    module = types.ModuleType("odd_result")
    module.masked_mean = lambda values, mask, axis=None: object()
    with Spy(module, functions=("masked_mean",)), pytest.raises(ContractViolation, match="cannot record") as info:
        module.masked_mean(torch.ones(2), torch.ones(2, dtype=torch.bool))
    assert not isinstance(info.value, HarnessConfigError)
    assert not hasattr(module.masked_mean, "__spy__")


def test_selective_log_softmax_record(mod):
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 7, generator=generator)
    index = torch.randint(0, 7, (2, 4), generator=generator)
    with Spy(mod) as spy:
        out = mod.log_probs(logits, index)
    (record,) = spy.records
    assert isinstance(record, LogProbCall) and record.fn == "selective_log_softmax"
    assert record.site.name == "new_logprobs" and record.dtype == "float32"
    assert record.index.dtype == torch.int64 and torch.equal(record.index, index)
    assert record.logprobs.dtype == torch.float64 and torch.equal(record.logprobs, out.double())
    want = torch.distributions.Categorical(logits=logits.double()).entropy()
    torch.testing.assert_close(record.entropy, want, rtol=0, atol=1e-12)
    assert not hasattr(record, "logits") and not hasattr(record, "tensors")
    named = {"site", "seq", "index", "logprobs", "entropy", "dtype", "logprob_gap", "logprob_variance", "grad"}
    assert {f.name for f in fields(record)} == named
    assert record.grad is None  # no backward pass reached it
    assert record.logprob_gap.shape == index.shape and float(record.logprob_gap.max()) < 1e-5


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 4),
    width=st.integers(1, 5),
    vocab=st.integers(1, 9),
    scale=st.floats(0.01, 30.0),
    chunk=st.integers(1, 64),
    seed=st.integers(0, 2**16),
)
def test_entropy_matches_categorical(rows, width, vocab, scale, chunk, seed):
    logits = scale * torch.randn(rows, width, vocab, generator=torch.Generator().manual_seed(seed))
    got = token_entropy(logits.float(), chunk_elements=chunk)
    want = torch.distributions.Categorical(logits=logits.float().double()).entropy()
    assert got.shape == (rows, width) and got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_entropy_ignores_minus_infinity_logits():
    logits = torch.tensor([[[0.0, 0.0, float("-inf")], [1.0, float("-inf"), float("-inf")]]])
    got = token_entropy(logits)
    torch.testing.assert_close(got, torch.tensor([[torch.log(torch.tensor(2.0)).item(), 0.0]], dtype=torch.float64))


def test_records_hold_no_logits(mod):
    batch, width, vocab = 3, 4, 257
    logits = torch.randn(batch, width, vocab)
    index = torch.randint(0, vocab, (batch, width))
    alive = weakref.ref(logits)
    with Spy(mod) as spy:
        mod.log_probs(logits, index)
    del logits
    gc.collect()
    assert alive() is None, "a record (or the spy) kept the logits alive"
    assert spy.records
    for record in spy.records:
        tensors = {f.name: getattr(record, f.name) for f in fields(record)}
        tensors = {name: value for name, value in tensors.items() if isinstance(value, torch.Tensor)}
        assert set(tensors) == {"index", "logprobs", "entropy", "logprob_gap", "logprob_variance"}
        for name, tensor in tensors.items():
            assert tensor.numel() <= batch * width, f"{name} holds {tuple(tensor.shape)}"
            assert vocab not in tensor.shape


def test_restores_on_exception_in_block(mod):
    original = mod.masked_mean, mod.selective_log_softmax
    with pytest.raises(RuntimeError, match="boom"), Spy(mod):
        assert mod.masked_mean is not original[0]
        raise RuntimeError("boom")
    assert (mod.masked_mean, mod.selective_log_softmax) == original
    assert mod.masked_mean is original[0]


def test_restores_when_the_real_function_raises(mod):
    original = mod.masked_mean
    values, mask = inputs()
    with pytest.raises(RuntimeError), Spy(mod) as spy:
        mod.failing(values, mask)
    assert mod.masked_mean is original
    assert spy.records == []


def test_missing_function_raises_spy_error():
    module = types.ModuleType("no_functions")
    module.masked_mean = lambda values, mask, axis=None: values
    with pytest.raises(SpyError, match=r"no_functions.*selective_log_softmax") as info:
        with Spy(module):
            pass
    assert isinstance(info.value, HarnessConfigError)
    assert "\n" not in str(info.value)
    assert not hasattr(module, "selective_log_softmax")


def test_non_callable_attribute_raises_spy_error():
    module = types.ModuleType("not_callable")
    module.masked_mean = 3
    module.selective_log_softmax = lambda logits, index: logits
    with pytest.raises(SpyError, match=r"not_callable.*masked_mean.*not callable"):
        Spy(module).__enter__()
    assert module.masked_mean == 3


def test_nested_spy_on_one_module_is_refused(mod):
    values, mask = inputs()
    with Spy(mod) as outer:
        with pytest.raises(SpyError, match="already being spied"):
            with Spy(mod):
                pass
        mod.all_forms(values, mask)  # the outer spy still records after the refused nesting
    assert len(outer.records) == len(FORM_NAMES)
    with Spy(mod) as again:  # and the module can be spied on again afterwards
        mod.keyword_call(values, mask)
    assert len(again.records) == 1


def test_same_spy_cannot_be_entered_twice(mod):
    spy = Spy(mod)
    with spy, pytest.raises(SpyError):
        spy.__enter__()


def test_pause_mark_clear_and_calls(mod):
    values, mask = inputs()
    logits, index = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    with spy_on(mod) as spy:
        mod.keyword_call(values, mask)
        with spy.paused():
            mod.all_forms(values, mask)
        marker = spy.mark("update 2")
        mod.log_probs(logits, index)
    assert [r.fn for r in spy.records] == ["masked_mean", "mark", "selective_log_softmax"]
    assert [type(r) for r in spy.records] == [MaskedMeanCall, Mark, LogProbCall]
    assert isinstance(marker, Mark) and spy.records[1] is marker
    assert marker.label == "update 2" and marker.site.name == "update 2"
    assert [r.seq for r in spy.records] == sorted(r.seq for r in spy.records)
    assert len(spy.calls("masked_mean")) == 1
    assert len(spy.calls(name="new_logprobs")) == 1
    assert spy.calls("masked_mean", name="new_logprobs") == []
    spy.clear()
    assert spy.records == [] and spy.calls() == []


def test_source_unavailable_gives_name_none():
    module = types.ModuleType("no_source")
    exec(compile(textwrap.dedent(SITE_SOURCE), "<no-source>", "exec"), module.__dict__)
    values, mask = inputs()
    with Spy(module) as spy:
        module.keyword_call(values, mask)
    (record,) = spy.records
    assert record.site == Site("<no-source>", "keyword_call", None)


def test_threads_record_every_call_once(mod):
    values, mask = inputs()
    calls_per_thread, threads = 25, 6

    def work() -> None:
        for _ in range(calls_per_thread):
            mod.keyword_call(values, mask)

    with Spy(mod) as spy:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert len(spy.records) == calls_per_thread * threads
    assert len({r.seq for r in spy.records}) == len(spy.records)
    assert [r.seq for r in spy.records] == sorted(r.seq for r in spy.records)  # list order is call order
    assert all(r.site.name == "per_row" for r in spy.records)


def test_record_accessors_name_the_missing_tensor():
    # Records are typed now: a record has exactly the fields of its call, and reading a tensor
    # another kind of call has is an AttributeError naming it.
    site = Site("f", "g", "x")
    for record in (Record(site, 0), LogProbCall(site, 0), Mark(site, 0, label="x")):
        with pytest.raises(AttributeError, match="'values'"):
            _ = record.values
    with pytest.raises(AttributeError, match="'index'"):
        _ = MaskedMeanCall(site, 0).index
    assert MaskedMeanCall(site, 0).name == "x" and Mark(site, 0).name == "x"
    kinds = (Record, MaskedMeanCall, LogProbCall, Mark)
    assert [kind.fn for kind in kinds] == ["", "masked_mean", "selective_log_softmax", "mark"]
    assert OtherCall(site, 0, function="clamp").fn == "clamp"


def test_spy_does_not_import_torch_at_module_load():
    code = (
        "import sys, harness.instrument.spy, harness.instrument.records, harness.instrument.callsite; "
        "print('torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"


def test_line_fallback_when_positions_are_unknown(mod, monkeypatch):
    monkeypatch.setattr(callsite, "_call_span", lambda frame: None)
    callsite.clear_source_cache()
    values, mask = inputs()
    try:
        with Spy(mod) as spy:
            mod.all_forms(values, mask)
    finally:
        callsite.clear_source_cache()
    fallback = FORM_NAMES.copy()
    fallback[5:7] = ["first,second", "first,second"]  # without columns, a tuple target gives joined names
    assert [r.site.name for r in spy.records] == fallback


NESTED_SOURCE = """
def masked_mean(values, mask, axis=None):
    return values


def selective_log_softmax(logits, index):
    return logits


def wrap(x):
    return x


def nested(v, m):
    outer = wrap(
        (inner := masked_mean(v, m))
    )
    other = masked_mean(v, m)
    return outer, inner, other
"""


def test_innermost_assignment_wins(tmp_path):
    module = load(tmp_path, NESTED_SOURCE, "nested_sites")
    with Spy(module) as spy:
        module.nested(torch.ones(2), torch.ones(2, dtype=torch.bool))
    assert [r.site.name for r in spy.records] == ["inner", "other"]


def test_other_spied_functions_get_an_other_call_record():
    assert set(RECORDERS) == set(DEFAULT_FUNCTIONS)
    assert all(recorder_for(fn) is RECORDERS[fn] for fn in DEFAULT_FUNCTIONS)
    module = types.ModuleType("other_functions")
    module.scale = lambda x, factor, offset=None: x * factor
    x = torch.arange(3, dtype=torch.float32)
    with Spy(module, functions=("scale",)) as spy:
        out = module.scale(x, 2.0, offset=torch.ones(1, dtype=torch.int64))
    (record,) = spy.records
    assert isinstance(record, OtherCall) and record.fn == "scale" and record.function == "scale"
    assert set(record.tensors) == {"arg0", "arg2", "result"}  # tensor arguments by position, and the result
    assert all(t.dtype == torch.float64 for t in record.tensors.values())
    assert torch.equal(record.tensors["result"], out.double()) and torch.equal(record.tensors["arg0"], x.double())


def test_the_spy_checks_each_log_prob_against_its_own_logits():
    """What selective_log_softmax returns follows from its inputs: a gather at the wrong positions shows."""
    from harness.instrument.spy import logprob_gap

    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    index = torch.randint(0, 11, (3, 5))
    right = torch.log_softmax(logits, dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    wrong = torch.log_softmax(logits, dim=-1).gather(-1, index.roll(1, dims=1).unsqueeze(-1)).squeeze(-1)
    assert logprob_gap(logits, index, right).max() < 1e-6
    assert logprob_gap(logits, index, wrong).max() > 0.1
    assert logprob_gap(logits, index, right, chunk_elements=11).shape == (3, 5)  # one position at a time
