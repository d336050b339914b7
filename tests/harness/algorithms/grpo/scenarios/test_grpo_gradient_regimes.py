"""logp_gradient's regimes no other run of it has: no stored old log-probs (`run=on_the_fly`) and clip bounds that
differ (`run=clip_asymmetric`); a run that does not show its regime is refused rather than passed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.algorithms import case, cases
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.scenarios import preconditions
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import Observation
from harness.verdict import Check, CheckId
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache

ON_THE_FLY = "logp_gradient[run=on_the_fly]"


def spec_of(check_id: str) -> GRPOSpec:
    return gradient_scenarios.run_spec(GRPOSpec(), case(check_id, "grpo"))


def test_on_the_fly_is_the_one_logp_gradient_run_that_stores_no_old_logprobs():
    """One window per generation and one pass: a generation never outlives an optimizer step, so neither TRL nor the
    reference stores old log-probs (the loss takes the current ones, detached); every other run stores them."""
    spec = spec_of(ON_THE_FLY)
    assert spec.window_sizes == (spec.generation_steps,) and spec.num_iterations == 1
    others = [str(c.id) for c in cases("grpo") if c.scenario.name == "logp_gradient" and str(c.id) != ON_THE_FLY]
    assert others and all(stores_old_logps(spec_of(other)) for other in others)


def stores_old_logps(spec) -> bool:
    """Whether a generation of `spec`'s run outlives an optimizer step: more than one window per generation, or, with
    windows across generations, windows that are not whole generations (TRL's rule)."""
    if spec.windows_across_generations:
        return spec.gradient_accumulation_steps % (spec.generation_steps * spec.num_iterations) != 0
    return len(spec.window_sizes) > 1


@pytest.fixture(scope="module")
def on_the_fly():
    return reference("grpo").get(spec_of(ON_THE_FLY), spy=False)


def test_the_reference_passes_on_the_fly(on_the_fly):
    result = case(ON_THE_FLY, "grpo").run(FixedCache.of(on_the_fly), GRPOSpec())
    assert result.passed, result.message
    assert on_the_fly.spec == spec_of(ON_THE_FLY)


def test_a_run_that_stores_old_logprobs_fails_the_on_the_fly_case(on_the_fly):
    stored = Observation(on_the_fly.spec.with_(steps_per_generation=2), on_the_fly.outcome)
    result = case(ON_THE_FLY, "grpo").run(FixedCache.of(stored), GRPOSpec())
    assert not result.passed and "windows of [1, 1] micro-batches per generation" in result.message
    assert "the run stores old log-probs" in result.message


CLIP_ASYMMETRIC = "logp_gradient[run=clip_asymmetric]"


def test_the_asymmetric_clip_run_keeps_bounds_that_already_differ_and_makes_equal_ones_differ():
    assert (spec_of(CLIP_ASYMMETRIC).epsilon_low, spec_of(CLIP_ASYMMETRIC).epsilon_high) == (0.05, 0.6)
    own = gradient_scenarios.run_spec(GRPOSpec(epsilon_low=0.2, epsilon_high=0.28), case(CLIP_ASYMMETRIC, "grpo"))
    assert (own.epsilon_low, own.epsilon_high) == (0.2, 0.28)
    even = gradient_scenarios.run_spec(GRPOSpec(epsilon_low=0.3, epsilon_high=0.3), case(CLIP_ASYMMETRIC, "grpo"))
    assert even.epsilon_low != even.epsilon_high


def test_a_run_whose_bounds_cannot_be_told_apart_fails_the_asymmetric_clip_case():
    """The case exists to tell the two bounds apart: with equal bounds no token's formula changes when they are
    swapped, and the case fails saying so rather than passing on a run that cannot see a swap."""
    obs = reference("grpo").get(spec_of(CLIP_ASYMMETRIC), spy=False)
    passed = case(CLIP_ASYMMETRIC, "grpo").run(FixedCache.of(obs), GRPOSpec())
    assert passed.passed, passed.message
    assert any("swapped" in note for note in passed.notes)
    even = Observation(obs.spec.with_(epsilon_high=obs.spec.epsilon_low), obs.outcome)
    result = case(CLIP_ASYMMETRIC, "grpo").run(FixedCache.of(even), GRPOSpec())
    assert not result.passed and "the run did not tell the two bounds apart" in result.message


def record(generation: int, window: int = 0, longest: int = 3, rank: int = 0):
    """The fields of a loss record the regime preconditions read: one row keeping `longest` tokens of 12."""
    mask = torch.zeros(1, 12)
    mask[0, :longest] = 1
    return SimpleNamespace(rank=rank, generation=generation, window=window, completion_mask=mask)


def test_a_run_without_a_window_across_generations_fails_saying_so_and_one_with_it_notes_where():
    whole = [record(0, window=0), record(0, window=0), record(1, window=1), record(1, window=1)]
    check = Check(CheckId("logp_gradient"))
    assert not preconditions.require_spanning_window(whole, GRPOSpec(), check)
    assert check.problems == ["0 of 2 windows whose micro-batches come from two generations: the run did not show a "
                              "window across generations"]  # fmt: skip
    spanning = [record(0, window=0), record(0, window=0), record(1, window=0), record(1, window=1)]
    check = Check(CheckId("logp_gradient"))
    assert preconditions.require_spanning_window(spanning, GRPOSpec(), check) and not check.failed
    (note,) = check.notes
    assert note == "1 of 2 windows whose micro-batches come from two generations (window 1: generations [0, 1])"


def test_a_run_whose_generations_each_reach_the_maximum_fails_saying_so_and_a_short_one_is_noted():
    spec = GRPOSpec(max_completion_length=12)
    full = [record(0, longest=12), record(0, longest=2), record(1, longest=12)]
    check = Check(CheckId("logp_gradient"))
    assert not preconditions.require_short_generation(full, spec, check)
    assert check.problems[0].endswith("(12): the run did not show completions shorter than the maximum")
    assert check.problems[0].startswith("0 of 2 generations")
    check = Check(CheckId("logp_gradient"))
    assert preconditions.require_short_generation([*full, record(2, longest=5), record(2, rank=1)], spec, check)
    assert check.notes[0].startswith("2 of 4 generations") and check.notes[0].endswith("(their longest [5, 3])")
