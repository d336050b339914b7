"""The reference PPO trainer with `val/ratio_var` left out of its logs: the pooled check fails it, unless its factory
declares it not logged (`factory.unlogged_metrics`), when the check leaves it out with a note and compares the other
pooled statistics; declared but logged, it fails the check; a check whose every metric is declared is not
applicable (harness/unlogged.py)."""

from __future__ import annotations

from harness.algorithms.ppo.contract import LR0_IDENTITIES
from harness.algorithms.ppo.targets.reference import factory
from tests.support.unlogged_doubles import NOTE, fails_unless_declared, verdict, without

HERE = "tests.harness.algorithms.ppo.scenarios.test_ppo_unlogged"
RATIO_VAR = "val/ratio_var"
IDENTITIES = tuple(LR0_IDENTITIES)

no_ratio_var = without(factory, RATIO_VAR, algorithm="ppo")
declared_no_ratio_var = without(factory, RATIO_VAR, algorithm="ppo", unlogged_metrics=(RATIO_VAR,))
declared_but_logged = without(factory, algorithm="ppo", unlogged_metrics=(RATIO_VAR,))
no_identities = without(factory, *IDENTITIES, algorithm="ppo", unlogged_metrics=IDENTITIES)


def test_a_metric_the_trainer_does_not_log_fails_the_pooled_check_unless_declared():
    compared = fails_unless_declared(f"{HERE}:no_ratio_var", f"{HERE}:declared_no_ratio_var", "even_split", RATIO_VAR)
    assert RATIO_VAR not in compared and {"loss/policy_avg", "val/ratio"} <= compared


def test_a_declared_metric_the_trainer_logs_fails_the_check():
    result = verdict(f"{HERE}:declared_but_logged", "even_split")
    assert result["status"] == "fail" and f"{RATIO_VAR} declared in unlogged_metrics but logged" in result["message"]


def test_a_check_whose_every_metric_is_declared_not_logged_is_not_applicable():
    result = verdict(f"{HERE}:no_identities", "lr0_ratio[epochs=1]")
    assert result["status"] == "not_applicable" and not result["metrics"], result["message"]
    assert NOTE + ", ".join(IDENTITIES) in result["message"]


no_policy_avg = without(factory, "loss/policy_avg", RATIO_VAR, algorithm="ppo")
declared_no_policy_avg = without(factory, "loss/policy_avg", RATIO_VAR, algorithm="ppo",
                                 unlogged_metrics=("loss/policy_avg", RATIO_VAR))  # fmt: skip


def test_partition_invariance_leaves_out_what_the_target_declares_and_still_compares_the_rest():
    """The splits' comparison reads the declaration too: a pooled mean and the variance the trainer does not log
    fail it undeclared, and declared they are left out with the note while the other means are compared."""
    said = verdict(f"{HERE}:no_policy_avg", "partition_invariance")
    assert said["status"] == "fail" and "loss/policy_avg" in said["message"], said["message"]
    passed = verdict(f"{HERE}:declared_no_policy_avg", "partition_invariance")
    assert passed["status"] == "pass", passed
    assert NOTE + "loss/policy_avg" in passed["message"] and NOTE + RATIO_VAR in passed["message"], passed
    compared = {m["name"] for m in passed["metrics"]}
    assert "loss/policy_avg" not in compared and RATIO_VAR not in compared and "val/ratio" in compared, compared
