"""logging_cadence (definitions.py): how many optimizer steps one log covers, logging_steps of them (trl: transformers'
Trainer logs when global_step is a multiple of logging_steps) or one generation's (verl: RayPPOTrainer.fit logs once
per training step). `no_kl` logs after each of its 4 optimizer steps, one generation: the reference GRPO trainer made
to log once per generation (it runs the spec with logging_steps a generation's optimizer steps) passes it declaring
'generation' and fails it declaring nothing, the note naming the verl profile; the reference trainer itself, which
logs as configured, fails it declaring 'generation', the note naming the trl profile. The trainer always runs the spec
as configured: the declaration changes how its logs are judged, never what it is asked to run."""

from __future__ import annotations

import pytest

from harness.algorithms import case
from harness.algorithms.grpo.definitions import VOCABULARY
from harness.algorithms.grpo.runs import NO_KL, per_generation
from harness.algorithms.grpo.spec import GRPOSpec
from harness.targets import Target
from tests.support.gates import declaring, observations, reference

CHECK = "no_kl"
GENERATION = {"logging_cadence": "generation"}


def once_per_generation(spec):
    """The reference GRPO run of `spec`, logging once per generation whatever its logging_steps."""
    from harness.algorithms.grpo.targets.reference import factory

    return factory(per_generation(spec))


once_per_generation.algorithm = "grpo"


def judged(cache, declared):
    target = Target("declares", "grpo", print, definitions=VOCABULARY.resolve(declared))
    return case(CHECK, "grpo").run(declaring(cache, target), GRPOSpec())


def test_a_once_per_generation_trainer_passes_declaring_it_and_is_named_undeclared():
    per_generation_cache = observations(once_per_generation)
    assert judged(per_generation_cache, GENERATION).passed
    undeclared = judged(per_generation_cache, "trl")
    assert not undeclared.passed
    assert any("logging_cadence generation (the verl profile's)" in n for n in undeclared.notes), undeclared.notes


def test_a_trainer_that_logs_as_configured_fails_declaring_generation_by_name():
    assert judged(reference("grpo"), "trl").passed
    misdeclared = judged(reference("grpo"), GENERATION)
    assert not misdeclared.passed
    assert any("logging_cadence configured (the trl profile's)" in n for n in misdeclared.notes), misdeclared.notes


@pytest.mark.parametrize("bs, gas, spg", [(4, 1, 4), (2, 2, 8), (1, 4, 16)])
def test_no_micro_batch_cut_moves_a_generations_log(bs, gas, spg):
    """The same generation of 16 completions and optimizer steps of 4 completions, cut into micro-batches of 4, 2
    and 1: one log covers its 4 optimizer steps whatever the cut."""
    spec = NO_KL.with_(per_device_train_batch_size=bs, gradient_accumulation_steps=gas, steps_per_generation=spg)
    assert per_generation(spec).logging_steps == 4 and per_generation(spec).total_logs == 1
