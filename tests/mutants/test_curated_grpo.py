"""The curated catalogue's GRPO mutants end to end (slow: CI runs it): each killed by a check it names, beside
the GRPO controls (tests/support/curated.py; the PPO half is test_curated_ppo.py)."""

import pytest

from tests.support.curated import run_algorithm


@pytest.mark.slow
def test_curated_runner_kills_every_catalogued_grpo_mutant(tmp_path, capsys):
    by_id = run_algorithm("grpo", tmp_path, capsys)
    # a global counter steps at the wrong micro-batch in the plain run and in the clipped one alike
    g15 = ["every_microbatch_applied", "every_microbatch_applied[max_grad_norm=0.05]"]
    assert by_id["g15_global_accumulation_counter"]["named_failed"] == g15
    assert by_id["g23_clipped_every_microbatch"]["named_failed"] == ["every_microbatch_applied[max_grad_norm=0.05]"]
    g44 = ["reward_model", "reward_model[multi_objective_aggregation=normalize_then_sum]"]  # both read the model
    assert by_id["g44_reward_at_last_padded_position"]["named_failed"] == g44
    assert by_id["g49_batch_std_for_group"]["named_failed"] == ["advantages[scale_rewards=group]"]
    for empty in ("g12_empty_microbatch_counts", "g24_nan_gradient_finite_stats"):
        assert by_id[empty]["named_failed"] == ["all_masked"], by_id[empty]
    # the GRPO forms fail the two-process gradient under the default loss type, under grpo's and bnpo's, under the
    # entropy mask, and beside the entropy bonus (whose run holds the policy term's gradient too)
    grpo_ranks = ["logp_gradient[ranks=2]", "logp_gradient[ranks=2,loss_type=grpo]",
                  "logp_gradient[ranks=2,loss_type=bnpo]", "logp_gradient[ranks=2,run=top_entropy]",
                  "entropy_gradient[ranks=2]"]  # fmt: skip
    for dist in ("g31_no_world_factor", "g33_sync_on_first_microbatch"):
        assert by_id[dist]["named_failed"] == grpo_ranks, by_id[dist]
    g95 = by_id["g95_entropy_bonus_counted_on_its_rank"]  # the bonus's count kept on the rank: its own check alone
    assert g95["named_failed"] == ["entropy_gradient[ranks=2]"] and g95["diagnosed_classes"] == [95], g95
    g96 = by_id["g96_optimizer_default_settings"]  # AdamW at torch's defaults: only the run that declares others
    assert g96["named_failed"] == ["lr_schedule"] and g96["diagnosed_classes"] == [96], g96
    for soft in ("sapo", "vespo"):  # their settings at TRL's defaults: only the runs that set others, off policy
        hard_coded = next(m for i, m in by_id.items() if i.startswith(f"g70_{soft}_"))
        named = [f"off_policy[loss_type={soft}]", f"logp_gradient[run=off_policy,loss_type={soft}]"]
        assert hard_coded["named_failed"] == named and hard_coded["diagnosed_classes"] == [70], hard_coded
    for g97 in ("g97_off_policy_mask_never_applied", "g97_off_policy_mask_on_kl"):  # the mask's own run alone
        assert by_id[g97]["named_failed"] == ["logp_gradient[run=off_policy_mask]"], by_id[g97]
        assert by_id[g97]["diagnosed_classes"] == [97], by_id[g97]
    gate = by_id["g98_adaptive_entropy_gate_ignored"]  # adaptive control: both of its runs see the gate ignored
    assert gate["named_failed"] == ["entropy_gradient[run=adaptive]", "entropy_gradient[run=adaptive_gated]"], gate
    early = by_id["g98_adaptive_entropy_moved_before_the_last_micro_batch"]  # the gated run's gate stays shut
    assert early["named_failed"] == ["entropy_gradient[run=adaptive]"], early
    assert gate["diagnosed_classes"] == early["diagnosed_classes"] == [98], (gate, early)
