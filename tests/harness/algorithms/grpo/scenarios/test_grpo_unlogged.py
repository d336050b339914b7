"""The reference GRPO trainer with metrics left out of its logs: a pooled check fails it, unless its factory declares
them not logged (`factory.unlogged_metrics`): then the check leaves them out with a note and compares the rest; a
declared metric that is logged anyway fails the check; a check whose every metric is declared is not applicable
(harness/unlogged.py)."""

from __future__ import annotations

from harness.algorithms.grpo.targets.reference import factory
from tests.support.unlogged_doubles import NOTE, fails_unless_declared, verdict, without

HERE = "tests.harness.algorithms.grpo.scenarios.test_grpo_unlogged"
LOW_MIN = "clip_ratio/low_min"
REWARD_STATS = ("reward", "reward_std", "frac_reward_zero_std", "rewards/*/mean", "rewards/*/std")

no_low_min = without(factory, LOW_MIN, algorithm="grpo")
declared_no_low_min = without(factory, LOW_MIN, algorithm="grpo", unlogged_metrics=(LOW_MIN,))
declared_but_logged = without(factory, algorithm="grpo", unlogged_metrics=(LOW_MIN,))
TERMINATED = ("completions/mean_terminated_length", "completions/min_terminated_length",
              "completions/max_terminated_length")  # fmt: skip
no_terminated = without(factory, *TERMINATED, algorithm="grpo", unlogged_metrics=TERMINATED)
no_reward_stats = without(factory, *REWARD_STATS, algorithm="grpo", unlogged_metrics=REWARD_STATS)


def test_a_metric_the_trainer_does_not_log_fails_the_pooled_check_unless_declared():
    compared = fails_unless_declared(f"{HERE}:no_low_min", f"{HERE}:declared_no_low_min", "no_kl", LOW_MIN)
    assert LOW_MIN not in compared and {"entropy", "clip_ratio/low_mean", "clip_ratio/high_max"} <= compared


def test_a_declared_metric_the_trainer_logs_fails_the_check_and_is_still_compared():
    result = verdict(f"{HERE}:declared_but_logged", "no_kl")
    assert result["status"] == "fail"
    assert (f"{LOW_MIN} declared in unlogged_metrics but logged (bs=4,gas=1,spg=4,iters=1): compare it by removing it "
            f"from the declaration") in result["message"]  # fmt: skip
    assert LOW_MIN in {m["name"] for m in result["metrics"] if m["status"] == "pass"}


def test_a_check_whose_every_metric_is_declared_not_logged_is_not_applicable():
    result = verdict(f"{HERE}:no_reward_stats", "reward_stats[run=one_function]")
    assert result["status"] == "not_applicable" and not result["metrics"], result["message"]
    assert NOTE + "reward, reward_std, frac_reward_zero_std, rewards/" in result["message"]


def test_the_length_statistics_left_out_are_said_and_the_others_compared():
    result = verdict(f"{HERE}:no_terminated", "completion_lengths")
    assert result["status"] == "pass" and NOTE + ", ".join(TERMINATED) in result["message"], result["message"]
    assert {m["name"] for m in result["metrics"]} == {"completions/mean_length", "completions/min_length",
                                                      "completions/max_length", "completions/clipped_ratio"}
