"""minibatch_schedule: the rollout rows each epoch's minibatches trained on, from the view's pairing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.ppo.runs import UNEVEN
from harness.algorithms.ppo.scenarios import SCENARIOS
from harness.algorithms.ppo.scenarios.schedule import epoch_partitions
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.verdict import Check, CheckId
from tests.support.gates import reference

SPEC = UNEVEN.with_(num_ppo_epochs=2)  # 12 rows, minibatches of 6 cut 4 + 2


def update_of(*orders: list[int]):
    """A fake update whose epochs trained on the rows of `orders` (one permutation of 12 rows each), cut 4 + 2."""
    micro = []
    for order in orders:
        for start, size in ((0, 4), (4, 2), (6, 4), (10, 2)):
            rows = torch.tensor(order[start : start + size])
            micro.append(SimpleNamespace(rollout_rows=rows, old_problem=None))
    return SimpleNamespace(index=0, micro_batches=tuple(micro))


def partitions(*orders: list[int]):
    check = Check(CheckId("minibatch_schedule"))
    return epoch_partitions(update_of(*orders), SPEC, check), check


def test_two_fresh_permutations_give_two_partitions():
    first = list(range(12))
    second = [11, 0, 10, 1, 9, 2, 8, 3, 7, 4, 6, 5]
    found, check = partitions(first, second)
    assert not check.failed and len(set(found)) == 2
    assert found[0] == frozenset({frozenset(range(6)), frozenset(range(6, 12))})


def test_the_same_rows_in_another_order_within_the_minibatches_is_the_same_partition():
    found, check = partitions(list(range(12)), [5, 4, 3, 2, 1, 0, 11, 10, 9, 8, 7, 6])
    assert not check.failed and len(set(found)) == 1
    found, _ = partitions(list(range(12)), [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5])  # the minibatches swapped
    assert len(set(found)) == 1


def test_a_row_trained_twice_in_an_epoch_fails():
    found, check = partitions(list(range(12)), [0, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    assert found is None and check.failed
    problem = check.problems[0]
    assert "epoch 2" in problem and "more than once [0]" in problem and "never [1]" in problem


def test_rows_not_paired_fail_not_pass():
    update = update_of(list(range(12)), list(range(12)))
    micro = list(update.micro_batches)
    micro[0] = SimpleNamespace(rollout_rows=None, old_problem="row 0 matches no rollout response")
    check = Check(CheckId("minibatch_schedule"))
    assert epoch_partitions(SimpleNamespace(index=0, micro_batches=tuple(micro)), SPEC, check) is None
    assert "matches no rollout response" in check.problems[0]


def test_the_check_is_registered():
    assert "minibatch_schedule" in {s.name for s in SCENARIOS}


def first_epoch_twice(real):
    """`require_view` as a trainer that reuses its permutation sees it: every epoch's micro-batches the first's."""

    def view_of(obs, check):
        view = real(obs, check)
        updates = []
        for update in view.updates:
            half = update.micro_batches[: len(update.micro_batches) // 2]
            updates.append(SimpleNamespace(index=update.index, micro_batches=half + half))
        return SimpleNamespace(updates=tuple(updates))

    return view_of


@pytest.fixture(scope="module")
def reference_cache():
    return reference("ppo")


def test_the_reference_passes_and_a_reused_permutation_fails(reference_cache, monkeypatch):
    """On the reference's run; then with every epoch's micro-batches replaced by the first epoch's (the view of a
    trainer that reuses its permutation), which the check names."""
    from harness.algorithms.ppo.scenarios import schedule

    result = case("minibatch_schedule").run(reference_cache, ScenarioSpec())
    assert result.passed, result.message
    monkeypatch.setattr(schedule, "require_view", first_epoch_twice(schedule.require_view))
    result = case("minibatch_schedule").run(reference_cache, ScenarioSpec())
    assert not result.passed and "same minibatches" in result.message


class _Declares:
    """The reference's cache as a target declaring `minibatch_permutation` sees it."""

    def __init__(self, cache, value):
        self._cache, self.target = cache, SimpleNamespace(definition=lambda name, default: value)

    def get(self, *args, **kwargs):
        return self._cache.get(*args, **kwargs)


def test_a_target_declaring_fixed_minibatches_is_held_to_them(reference_cache, monkeypatch):
    """verl's actor (`shuffle: false`) trains the same minibatches every epoch, its documented definition: a target
    declaring `fixed` passes with the epochs' partitions equal, and fails when they differ, as the reference's do."""
    from harness.algorithms.ppo.scenarios import schedule

    declared = _Declares(reference_cache, "fixed")
    result = case("minibatch_schedule").run(declared, ScenarioSpec())
    assert not result.passed and "declares minibatch_permutation='fixed'" in result.message
    monkeypatch.setattr(schedule, "require_view", first_epoch_twice(schedule.require_view))
    assert case("minibatch_schedule").run(declared, ScenarioSpec()).passed
    assert not case("minibatch_schedule").run(_Declares(reference_cache, "per_epoch"), ScenarioSpec()).passed


def test_the_ppo_profiles_resolve():
    from harness.algorithms.ppo.definitions import MINIBATCH_PERMUTATION, VOCABULARY

    assert VOCABULARY.resolve(None) == ((MINIBATCH_PERMUTATION, "per_epoch"),)
    assert VOCABULARY.resolve("verl") == ((MINIBATCH_PERMUTATION, "fixed"),)
