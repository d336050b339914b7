"""The curated catalogue's PPO mutants end to end (slow: CI runs it): each killed by a check it names, beside the
PPO controls (tests/support/curated.py; the GRPO half is test_curated_grpo.py)."""

import pytest

from tests.support.curated import run_algorithm


@pytest.mark.slow
def test_curated_runner_kills_every_catalogued_ppo_mutant(tmp_path, capsys):
    by_id = run_algorithm("ppo", tmp_path, capsys)
    assert "lr0_ratio[epochs=1]" in by_id["c02_unwritten_slots_averaged"]["named_failed"]
    assert by_id["c15_global_accumulation_counter"]["named_failed"] == ["every_microbatch_applied[epochs=2]"]
    clipped = "settings_sweep[settings=clipped,check=every_microbatch_applied]"
    assert by_id["c23_clipped_every_microbatch"]["named_failed"] == [clipped]
    for dist in ("c31_loss_without_world_factor", "c32_local_token_count", "c33_sync_on_first_microbatch"):
        assert by_id[dist]["named_failed"] == ["logp_gradient[ranks=2]"], by_id[dist]
    # every rank seeded alike: exact on one process, the ranks' responses drawn with one random stream
    assert by_id["c87_ranks_seeded_alike"]["named_failed"] == ["sampling[ranks=2]"], by_id["c87_ranks_seeded_alike"]
