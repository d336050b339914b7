"""The GRPO schedule check: the counts the configuration implies and the one-pass rule of the prompts."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.algorithms.grpo.instruments import GRPORecords, recorded
from harness.algorithms.grpo.runs import spec_for
from harness.algorithms.grpo.scenarios.schedule import (
    SCHEDULE,
    SCHEDULE_SCENARIOS,
    generation_problems,
    log_steps,
    one_pass_problem,
    schedule,
)
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.targets.reference import factory
from harness.instrument.observe import Observation, ObservationCache
from harness.scenario import Case


class Served:
    """A cache that serves one observation whatever spec is asked for."""

    target = None

    def __init__(self, obs: Observation) -> None:
        self.obs = obs

    def get(self, spec, spy=True) -> Observation:
        return self.obs


@pytest.fixture(scope="module")
def observed() -> Observation:
    cache = ObservationCache(factory)
    result = schedule(cache, GRPOSpec(seed=0), Case(SCHEDULE_SCENARIOS[0]))
    assert result.passed, result.problems
    assert any("each used once before any twice" in n for n in result.notes)
    return cache.get(spec_for(SCHEDULE, GRPOSpec(seed=0)), spy=False)


def judged(obs: Observation, **changes) -> tuple[str, ...]:
    ran = dataclasses.replace(obs.ran, **changes)
    return schedule(Served(Observation(obs.spec, ran)), GRPOSpec(seed=0), Case(SCHEDULE_SCENARIOS[0])).problems


def test_the_schedule_runs_sizes_are_uneven():
    assert SCHEDULE.total_logs == 3 and log_steps(SCHEDULE) == [3, 6, 7]
    assert SCHEDULE.generation_batch // SCHEDULE.num_generations == 2 and SCHEDULE.num_prompts == 4


def test_a_missing_partial_last_log_fails(observed):
    problems = judged(observed, logs=observed.ran.logs[:-1])
    assert any("expected 3 log(s)" in p and "saw 2" in p for p in problems)


def test_logs_at_other_steps_fail(observed):
    logs = tuple({**log, "step": float(i + 1)} for i, log in enumerate(observed.ran.logs))
    assert any("logged at steps [1, 2, 3], expected [3, 6, 7]" in p for p in judged(observed, logs=logs))


def test_the_same_prompts_every_generation_fail(observed):
    calls = recorded(observed.ran).reward_calls
    first = calls[0].prompt_ids
    same = tuple(dataclasses.replace(c, prompt_ids=first) for c in calls)
    payload = GRPORecords(recorded(observed.ran).loss_inputs, same)
    problems = judged(observed, payload=payload)
    assert any("used again while another was not yet used" in p for p in problems)


def test_a_generation_scored_and_not_trained_fails(observed):
    calls = recorded(observed.ran).reward_calls
    extra = dataclasses.replace(calls[-1], generation=calls[-1].generation + 1)
    records = recorded(observed.ran).loss_inputs
    assert generation_problems(records, calls, SCHEDULE) == []
    assert (
        "generations scored [0, 1, 2, 3, 4], trained [0, 1, 2, 3]"
        in generation_problems(records, (*calls, extra), SCHEDULE)[0]
    )


def test_a_generation_per_step_fails(observed):
    records = tuple(dataclasses.replace(r, generation=i) for i, r in enumerate(recorded(observed.ran).loss_inputs))
    problem = generation_problems(records, (), SCHEDULE)[0]
    assert "generations trained [0, 1, 2, 3, 4, 5, 6], expected [0, 1, 2, 3]" in problem


def repeat_sampler(count: int, per_generation: int, generations: int, seed: int) -> list[list[int]]:
    """TRL's RepeatSampler's prompts per generation: a new permutation each epoch, an incomplete last batch dropped."""
    out: list[list[int]] = []
    generator = torch.Generator().manual_seed(seed)
    while len(out) < generations:
        order = torch.randperm(count, generator=generator).tolist()
        out += [order[i : i + per_generation] for i in range(0, count - per_generation + 1, per_generation)]
    return out[:generations]


@pytest.mark.parametrize("seed", range(5))
def test_a_sampler_with_a_new_permutation_each_epoch_keeps_the_rule(seed):
    assert one_pass_problem(repeat_sampler(12, 3, 20, seed), 12) == ""
    assert one_pass_problem(repeat_sampler(12, 12, 3, seed), 12) == ""


def test_the_rule_breaks_on_a_repeat_within_a_pass():
    assert one_pass_problem([[0, 1], [2, 3], [1, 0], [3, 2]], 4) == ""
    assert "prompt(s) [0] were used 2 times" in one_pass_problem([[0, 1], [0, 2]], 4)
    assert one_pass_problem([[0, 0]], 4) != ""
    # an incomplete last batch dropped (10 prompts, 3 a generation): uneven by design, which the check does not judge
    assert one_pass_problem([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 1, 2]], 10) != ""
