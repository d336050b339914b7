"""PPO's sampling[ranks=2]: each rank's rollout responses, read from the spy's rollout records, drawn with a random
stream of its own (harness/algorithms/ppo/ranks.py; the comparison: tests/harness/checks/test_rank_sampling.py)."""

from __future__ import annotations

import pytest
import torch

from harness.algorithms.ppo.ranks import rank_reads, rank_sampling, responses_of
from harness.algorithms.ppo.runs import UNEVEN
from harness.algorithms.ppo.view import run_view
from harness.verdict import CheckId, CheckStatus
from tests.support.gates import reference
from tests.support.seeded_alike import assert_sampling_alone_fails, seeded_alike_target

CHECK = CheckId("sampling", (("ranks", 2),))


def test_verify_dist_reads_the_uneven_split_for_it():
    assert rank_reads(2)[CHECK] == ("uneven_split",)


def test_each_update_s_responses_are_its_rollout_rows_in_order():
    ran = reference("ppo").get(UNEVEN).ran
    responses, updates = responses_of(ran), run_view(ran).updates
    assert sorted(responses) == [0, 1] and len(updates) == 2
    for update in updates:
        assert responses[update.index].shape == (UNEVEN.local_batch_size, UNEVEN.response_length)
        assert torch.equal(responses[update.index], update.rollout.responses)


def test_a_run_beside_itself_fails_and_beside_another_seed_s_passes():
    cache = reference("ppo")
    ran, other = cache.get(UNEVEN).ran, cache.get(UNEVEN.with_(seed=1)).ran
    copied = rank_sampling([ran, ran], CHECK)
    assert copied.status is CheckStatus.FAIL and "the same random stream" in copied.message
    apart = rank_sampling([ran, other], CHECK)
    assert apart.status is CheckStatus.PASS, apart.message


seeded_alike = seeded_alike_target("harness.algorithms.ppo.targets.reference", "ppo")
"""The reference PPO trainer with every rank's global random state reset to the run's seed as training starts:
the ranks sample with one random stream (class 87's bug, without its patch)."""


@pytest.mark.dist
@pytest.mark.slow
def test_ranks_seeded_alike_fail_sampling_across_ranks_alone(tmp_path):
    assert_sampling_alone_fails(tmp_path, "tests.harness.algorithms.ppo.test_ppo_rank_sampling:seeded_alike")
