"""The gradient trace keeps each step's `.grad` copy only for the runs whose checks read it.

An ordinary run keeps the steps' summaries (backward passes, unexplained part, norms, clipping
coefficient, non-finite tensors) and no copy; the runs a check gets inside `grad_copies()` keep the
copies; a check that reads copies from a run that kept none fails, naming why, and never passes.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.ppo.instruments import recorded
from harness.algorithms.ppo.scenarios import pooled as scenarios
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.instrument import grad
from harness.instrument.grad import SAMPLED, GradRecorder, GradTrackingLost
from harness.instrument.grad_trace import GradCopiesNotKept
from harness.instrument.observe import ObservationCache, grad_copies, observe, tracks
from tests.support.gates import reference

# ------------------------------------------------------------------ the recorder


def _train(copies: bool, tamper: str, dtype=torch.float32, track: bool = False, width: int = 4
           ) -> tuple[GradRecorder, list[torch.Tensor]]:  # fmt: skip
    """Two steps of two backward passes each on a small linear model, `tamper` doing something to .grad
    before each step (or between its backward passes); the recorder and the weights after the run."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, width), torch.nn.Linear(width, 3)).to(dtype)
    spare = torch.nn.Parameter(torch.ones(2, dtype=dtype))  # no backward pass reaches it
    params = [*model.parameters(), spare]
    optimizer = torch.optim.SGD(params, lr=0.1)
    data = torch.randn(4, 2, 5, dtype=dtype)
    with GradRecorder(params, optimizer, copies=copies, track=track, track_min=0) as recorder:  # track small ones too
        for step in range(2):
            for k, micro in enumerate(data[2 * step : 2 * step + 2]):
                model(micro).square().mean().backward()
                if k == 0 and tamper == "zeroed_between":  # a zero_grad inside the accumulation loop
                    optimizer.zero_grad()
                elif k == 0 and tamper == "halved_between":
                    params[2].grad.mul_(0.5)
            if tamper == "scaled":
                params[0].grad.mul_(2)
            elif tamper == "scaled_through_data":  # an in-place write the version counter does not see
                params[0].grad.data.mul_(2)
            elif tamper == "one_element_through_data":
                params[0].grad.data.view(-1)[-1] += 1.0
            elif tamper == "missing":
                params[1].grad = None
            elif tamper == "unexplained":
                spare.grad = torch.full_like(spare, 0.5)
            if tamper == "nan_input" and step == 0:  # a NaN in the data: autograd itself makes NaN gradients
                data[2:] = float("nan")
            optimizer.step()
            optimizer.zero_grad(set_to_none=tamper != "zeroed_in_place")
    return recorder, [p.detach().clone() for p in params]


SUMMARIES = ("clock", "backward_ids", "unexplained", "raw_norm", "applied_norm", "coefficient", "residual")


@pytest.mark.parametrize("tamper", ["clean", "scaled", "missing", "unexplained"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_without_copies_a_step_keeps_the_same_summaries_and_no_copy(tamper, dtype):
    kept, weights_kept = _train(True, tamper, dtype)
    bare, weights_bare = _train(False, tamper, dtype)
    assert kept.trace().copies and not bare.trace().copies
    assert len(kept.steps) == len(bare.steps) == 2
    for with_copy, without in zip(kept.steps, bare.steps):
        assert [getattr(with_copy, f) for f in SUMMARIES] == [getattr(without, f) for f in SUMMARIES]
        assert with_copy.nonfinite_grads == without.nonfinite_grads
        assert with_copy.copies and with_copy.grad.numel() == sum(w.numel() for w in weights_kept)
        assert not without.copies and without.grads is None and without.local is None
    assert (kept.steps[0].unexplained > 0) == (tamper != "clean")
    # the recorder only reads the trainer's .grad: the optimizer applied the same steps either way
    for a, b in zip(weights_kept, weights_bare):
        assert torch.equal(a, b)


# what the trainer does to .grad -> whether a tracking recorder still knows the contributions' sum
TAMPERS = {
    "clean": True,
    "zeroed_in_place": True,  # a .grad that is there at the first contribution is summed, as without tracking
    "unexplained": True,  # a .grad no contribution reached: measured as without tracking
    "scaled": False,
    "missing": False,
    "zeroed_between": False,
    "halved_between": False,
    "scaled_through_data": False,
    "one_element_through_data": False,  # in a tensor of SAMPLED elements or fewer every element is read
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_tracking_recorder_keeps_the_same_summaries_or_says_it_lost_them(tamper, dtype):
    summed, weights_summed = _train(False, tamper, dtype)
    tracked, weights_tracked = _train(False, tamper, dtype, track=True)
    if TAMPERS[tamper]:
        assert not tracked.lost
        for a, b in zip(summed.trace().steps, tracked.trace().steps, strict=True):
            assert [getattr(a, f) for f in SUMMARIES] == [getattr(b, f) for f in SUMMARIES]
            assert a.nonfinite_grads == b.nonfinite_grads
    else:
        assert tracked.lost
        with pytest.raises(GradTrackingLost, match="by something other than autograd"):
            tracked.trace()
    assert (summed.steps[0].unexplained > 0) == (tamper not in ("clean", "zeroed_in_place"))
    for a, b in zip(weights_summed, weights_tracked):  # the recorder only reads .grad, tracking or not
        assert torch.equal(a, b)


@pytest.mark.parametrize("track", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_non_finite_gradients_and_the_weights_they_make_are_counted_at_each_step(track, dtype):
    """A NaN that reaches the gradients through the data: the first step is clean, the second sees a NaN .grad
    in each tensor its backward passes reach (not the spare), leaves those weights NaN, and its unexplained part
    is NaN, never 0, whether the recorder summed the contributions or tracked autograd's own sum."""
    recorder, weights = _train(False, "nan_input", dtype, track=track)
    trace = recorder.trace()
    first, second = trace.steps
    reached = len(weights) - 1
    assert (first.nonfinite_grads, second.nonfinite_grads) == (0, reached)
    assert trace.nonfinite_weights == (0, reached)
    assert first.unexplained == 0.0 and math.isnan(second.unexplained)
    assert sum(not bool(torch.isfinite(w).all()) for w in weights) == reached


def test_nonfinite_counts_tensors_holding_a_nan_or_an_inf_and_not_a_sum_that_overflows():
    big = torch.full((4,), 3e38)  # finite values whose float32 sum is inf
    cases = {
        "finite": ([torch.randn(3, 5)], 0),
        "overflowing sum": ([big, -big.bfloat16()], 0),
        "nan": ([torch.tensor([1.0, float("nan")])], 1),
        "inf": ([torch.tensor([float("inf"), 1.0])], 1),
        "inf and -inf": ([torch.tensor([float("inf"), -float("inf")]).bfloat16()], 1),
        "empty": ([torch.empty(0)], 0),
        "several": ([torch.ones(2), torch.tensor([float("nan")]), big, torch.tensor([-float("inf")])], 2),
    }
    for name, (tensors, count) in cases.items():
        assert grad._nonfinite(tensors) == count, name


def test_tracking_sums_nothing_where_autograd_alone_wrote_grad():
    """The point of tracking: no pending sum is made for a step whose .grad autograd alone wrote."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    pending = {}
    for track in (True, False):
        params = list(model.parameters())
        with GradRecorder(params, optimizer, copies=False, track=track, track_min=0) as recorder:
            seen = []
            for _ in range(3):
                for _ in range(2):
                    model(torch.randn(2, 5)).sum().backward()
                seen.append([t is not None for t in recorder._pending])
                optimizer.step()
                optimizer.zero_grad()
        assert not recorder.lost and len(recorder.trace().steps) == 3
        pending[track] = seen
    assert pending == {True: [[False, False]] * 3, False: [[True, True]] * 3}
    assert tracks(scenarios.LR0, copies=False) and not tracks(scenarios.LR0, copies=True)
    assert not tracks(scenarios.LR0.with_(max_grad_norm=0.5), copies=False)  # clipping writes .grad every step


def test_a_write_through_data_to_a_large_grad_is_seen_in_its_sampled_elements():
    """Above SAMPLED elements, a scaled .grad changes every sampled value; the version counter missed it."""
    width = 2 * SAMPLED  # the first layer's weight: 5 x 512 elements
    recorder, _ = _train(False, "scaled_through_data", track=True, width=width)
    assert "parameter 0's .grad was written after the step's last backward pass" in recorder.lost


def test_observe_records_again_with_a_summing_recorder_where_tracking_lost_the_sums(monkeypatch):
    monkeypatch.setattr(grad, "TRACK_MIN", 0)  # the toy's parameters are below it: track them all
    factory, spec = _toy_factory(), scenarios.LR0.with_(name="grad_tracking_test")
    built = []

    def writes_its_grad(run_spec):  # a trainer that touches .grad before each step (values unchanged)
        run = factory(run_spec)
        built.append(run)

        def touch(optimizer, args, kwargs):
            for p in run.params:
                if p.grad is not None:
                    p.grad.mul_(1.0)

        run.optimizer.register_step_pre_hook(touch)  # before the recorder's, which is registered later
        return run

    again = observe(writes_its_grad, spec, spy=False)
    assert len(built) == 2  # trained once tracking, once summing
    summing = observe(factory, spec, spy=False, track=False)
    assert [[getattr(s, f) for f in SUMMARIES] for s in again.ran.grads.steps] == [
        [getattr(s, f) for f in SUMMARIES] for s in summing.ran.grads.steps
    ]
    tracked = observe(factory, spec, spy=False)  # the reference writes no .grad: tracking serves it
    assert [s.unexplained for s in tracked.ran.grads.steps] == [s.unexplained for s in summing.ran.grads.steps]


def test_without_copies_each_step_sums_into_the_storage_of_the_one_before():
    """A fresh model-sized tensor per step is mostly page faults; the summaries above show the reuse changes
    nothing, this that it happens (and that a run with copies never hands a kept sum to the next step)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: dict[bool, list[list[torch.Tensor]]] = {}
    for copies in (False, True):
        with GradRecorder(list(model.parameters()), optimizer, copies=copies) as recorder:
            sums = []  # each step's pending sums, held here so that no later one can take their memory
            for _ in range(3):
                model(torch.randn(2, 5)).sum().backward()
                sums.append(list(recorder._pending))
                optimizer.step()
                optimizer.zero_grad()
        seen[copies] = sums
        assert recorder._spare == [None, None]  # nothing held once the recorder is off
    reused = [[a is b for a, b in zip(before, after)] for before, after in zip(seen[False], seen[False][1:])]
    assert reused == [[True, True], [True, True]]
    kept = [[a is b for a, b in zip(before, after)] for before, after in zip(seen[True], seen[True][1:])]
    assert kept == [[False, False], [False, False]]


def test_a_copy_read_from_a_step_without_copies_raises():
    recorder, _ = _train(False, "clean")
    step = recorder.steps[0]
    with pytest.raises(GradCopiesNotKept, match="grad_copies"):
        step.grad  # noqa: B018
    with pytest.raises(GradCopiesNotKept, match="grad_copies"):
        step.local_grad  # noqa: B018


# ------------------------------------------------------------------ observe and the cache


def _toy_factory():
    from harness.algorithms.ppo.targets.reference import factory

    return factory


def test_the_ordinary_run_keeps_no_copies_and_one_inside_grad_copies_does():
    factory, spec = _toy_factory(), scenarios.LR0.with_(name="grad_copies_test")
    cache = ObservationCache(factory)
    ordinary = cache.get(spec)
    assert ordinary.ran.grads.steps and not ordinary.ran.grads.copies
    assert all(step.grads is None for step in ordinary.ran.grads.steps)
    with grad_copies():
        copied = cache.get(spec)
    assert copied is not ordinary  # a run without the copies cannot serve a request for them: it ran again
    assert copied.ran.grads.copies and all(step.grad.numel() for step in copied.ran.grads.steps)
    # the two runs saw the same steps; only the copies differ
    assert [s.unexplained for s in copied.ran.grads.steps] == [s.unexplained for s in ordinary.ran.grads.steps]
    assert cache.get(spec) is copied  # and the run with the copies serves every later request
    assert cache.get(spec, spy=False) is copied


def test_a_run_with_the_copies_serves_a_request_without_them():
    cache = ObservationCache(_toy_factory())
    spec = scenarios.LR0.with_(name="grad_copies_test")
    with grad_copies():
        copied = cache.get(spec, spy=False)
    assert copied.ran.grads.copies
    assert cache.get(spec, spy=False) is copied
    spied = cache.get(spec)  # the spy is another instrument: this one runs again, without the copies
    assert spied is not copied and not spied.ran.grads.copies and recorded(spied.ran).records


def test_observe_keeps_copies_only_when_asked():
    factory, spec = _toy_factory(), scenarios.LR0.with_(name="grad_copies_test")
    assert not observe(factory, spec, spy=False).ran.grads.copies
    assert observe(factory, spec, spy=False, copies=True).ran.grads.copies


# ------------------------------------------------------------------ the checks that read the copies


class WithoutCopies:
    """A cache that never keeps the .grad copies, whatever the check asks for (a check that forgot to ask)."""

    def __init__(self, factory) -> None:
        self.factory, self.seen = factory, {}

    def get(self, spec, spy: bool = True):
        if (spec, spy) not in self.seen:
            self.seen[(spec, spy)] = observe(self.factory, spec, spy=spy)
        return self.seen[(spec, spy)]


@pytest.mark.parametrize("check_id", ["gradient_partition", "gradient_decomposition"])
def test_a_ppo_check_that_reads_copies_fails_loudly_without_them(check_id):
    result = case(check_id, "ppo").run(WithoutCopies(_toy_factory()), ScenarioSpec())
    assert not result.passed
    assert "GradCopiesNotKept" in result.message and "grad_copies()" in result.message


def test_the_grpo_gradient_partition_fails_loudly_without_copies():
    from harness.algorithms.grpo.targets.reference import factory

    result = case("gradient_partition[loss_type=dapo]", "grpo").run(WithoutCopies(factory), GRPOSpec())
    assert not result.passed
    assert "GradCopiesNotKept" in result.message


@pytest.mark.parametrize(
    "check_id, algorithm",
    [("gradient_partition", "ppo"), ("gradient_decomposition", "ppo"), ("gradient_partition[loss_type=dapo]", "grpo")],
)
def test_the_checks_that_read_copies_get_them_and_pass(check_id, algorithm):
    spec = ScenarioSpec() if algorithm == "ppo" else GRPOSpec()
    cache = ObservationCache(reference(algorithm).factory)
    result = case(check_id, algorithm).run(cache, spec)
    assert result.passed, result.message
    assert all(obs.ran.grads.copies for obs in cache._seen.values())


def test_the_checks_that_read_only_summaries_keep_no_copies():
    cache = ObservationCache(_toy_factory())
    result = case("every_microbatch_applied[epochs=2]", "ppo").run(cache, ScenarioSpec())
    assert result.passed, result.message
    assert cache._seen and not any(obs.ran.grads.copies for obs in cache._seen.values())


def test_the_bench_measures_the_ordinary_run_and_the_one_with_copies():
    from harness.bench.measure import Clock, PeakMemory, gate_run
    from harness.bench.sizes import declared

    SMALL, oracle = declared("sizes")["small"], declared("oracle")

    memory, clock = PeakMemory("cpu"), Clock("cpu")
    ordinary = gate_run(_toy_factory(), SMALL.spec, memory, clock, oracle)
    copied = gate_run(_toy_factory(), SMALL.spec, memory, clock, oracle, copies=True)
    assert not ordinary.copies and ordinary.grad_trace_bytes == 0 and ordinary.steps == 2
    assert copied.copies and copied.grad_trace_bytes == 4 * ordinary.params * ordinary.steps
    assert ordinary.statuses == copied.statuses == {"pass": 13}


def test_only_parameters_of_track_min_elements_are_tracked():
    """Below TRACK_MIN elements a parameter is summed (the hooks would cost more than the sum): on the toy model
    with the default, nothing is tracked and no hook after accumulation is installed."""
    torch.manual_seed(0)
    small, large = torch.nn.Linear(4, 4), torch.nn.Linear(512, 512)  # 16 and 262144 weights
    params = [small.weight, large.weight]
    optimizer = torch.optim.SGD(params, lr=0.1)
    with GradRecorder(params, optimizer, copies=False, track=True) as recorder:
        assert recorder._trackable == [False, True]
        (small(torch.randn(2, 4)).sum() + large(torch.randn(2, 512)).sum()).backward()
        assert recorder._mode == ["summed", "tracked"]
        optimizer.step()
    assert recorder.trace().steps[0].unexplained == 0
