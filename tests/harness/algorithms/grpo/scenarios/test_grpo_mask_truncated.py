"""completion_mask[mask_truncated_completions=True]: with TRL's option on, every completion that ran to the limit
without the stop token has an empty mask in the loss, and the run must hold one; a trainer that ignores the option
fails, naming the rows."""

from __future__ import annotations

import dataclasses

import torch

from harness.algorithms import case
from harness.algorithms.grpo.runs import UNEVEN, spec_for
from harness.algorithms.grpo.scenarios.masks import mask_problem, truncated_rows
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.targets.trl.config import trl_args
from harness.instrument.observe import Observation
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, record

CHECK = "completion_mask[mask_truncated_completions=True]"
STOP, PAD = 1, 0


def with_ids(r, ids):
    return dataclasses.replace(r, completion_ids=torch.tensor(ids))


def test_a_row_with_neither_the_stop_token_nor_the_pad_is_truncated_and_must_be_empty():
    ids = [[3, 1, 0], [3, 4, 5], [3, 4, 5], [3, 0, 5]]
    r = with_ids(record([[1, 1, 0], [0, 0, 0], [1, 1, 1], [1, 0, 0]], [[0.0] * 3] * 4, [1.0] * 4), ids)
    kept, truncated = truncated_rows([r], STOP, PAD)
    assert truncated == 2  # rows 2 and 3; row 4 drew a pad, where trainers may end it otherwise
    assert len(kept) == 1 and kept[0].startswith("loss record 1 row 3: it ran to the limit without the stop token")


def test_with_the_option_a_row_that_drew_a_pad_before_its_stop_token_may_be_empty():
    """A trainer that ends a completion at a pad it drew sees no stop token in it (truncated), and empties it; one
    that keeps every token up to the stop token (TRL) keeps it: both are right, with the option. Without it, empty
    is wrong."""
    ids, empty = torch.tensor([3, 0, 1, 0]), torch.zeros(4, dtype=torch.bool)
    assert mask_problem(ids, empty, STOP, PAD, masked_truncated=True) == ""
    assert mask_problem(ids, torch.tensor([True, True, True, False]), STOP, PAD, masked_truncated=True) == ""
    assert mask_problem(ids, empty, STOP, PAD) != ""


def test_trl_is_handed_the_option():
    assert trl_args(GRPOSpec(mask_truncated_completions=True), "out", {})["mask_truncated_completions"] is True
    assert trl_args(GRPOSpec(), "out", {})["mask_truncated_completions"] is False


def masked_spec() -> GRPOSpec:
    return spec_for(UNEVEN, GRPOSpec()).with_(name="mask_truncated", mask_truncated_completions=True)


def test_the_reference_passes_with_truncated_completions_left_out():
    obs = reference("grpo").get(masked_spec(), spy=False)
    result = case(CHECK, "grpo").run(FixedCache.of(obs), GRPOSpec())
    assert result.passed, result.message
    assert any("ran to the limit without the stop token, 0 of them in the loss" in n for n in result.notes)


def test_a_trainer_that_ignores_the_option_fails():
    """The uneven run without the option, judged as a run with it: its truncated completions are in the loss."""
    plain = reference("grpo").get(spec_for(UNEVEN, GRPOSpec()), spy=False)
    ignored = Observation(masked_spec(), plain.outcome)
    result = case(CHECK, "grpo").run(FixedCache.of(ignored), GRPOSpec())
    assert not result.passed
    assert "mask_truncated_completions leaves it out of the loss" in result.message
    assert case("completion_mask", "grpo").run(FixedCache.of(plain), GRPOSpec()).passed
