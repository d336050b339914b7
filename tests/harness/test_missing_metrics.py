"""A check whose trainer did not log some of the contract's metrics names every one in one line, and still compares
every metric it did log, each with its own verdict: the reference's logs with one metric taken out (or one taken out
and another made wrong) are the trainer doubles, for a pooled check of each algorithm."""

from __future__ import annotations

import dataclasses

import pytest

from harness.algorithms import case
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.scenarios import pooled as grpo_scenarios
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.ppo.scenarios import pooled as ppo_scenarios
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.instrument.observe import Observation
from harness.verdict import CheckStatus, MetricStatus
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, grpo_check, ran

GRPO_CHECK = "uneven_lengths[loss_type=dapo]"


@pytest.fixture(scope="module")
def grpo_uneven():
    return reference("grpo").get(grpo_scenarios.spec_for(grpo_scenarios.UNEVEN, GRPOSpec()), spy=False)


def grpo_with(obs, change):
    """`GRPO_CHECK` on `obs`'s run with every log changed by `change`."""
    logs = [dict(log) for log in obs.ran.logs]
    for log in logs:
        change(log)
    broken = Observation(obs.spec, ran(logs, recorded(obs.ran).loss_inputs))
    return grpo_check(GRPO_CHECK, FixedCache.of(broken))


def statuses(result) -> dict[str, set[MetricStatus]]:
    """Each compared metric's statuses over the check's comparisons."""
    seen: dict[str, set[MetricStatus]] = {}
    for verdict in result.metrics:
        seen.setdefault(verdict.name, set()).add(verdict.status)
    return seen


def test_a_metric_left_out_fails_naming_it_and_the_others_are_still_compared(grpo_uneven):
    whole = grpo_check(GRPO_CHECK, FixedCache.of(grpo_uneven))
    assert whole.passed and "kl" in statuses(whole)
    result = grpo_with(grpo_uneven, lambda log: log.pop("kl"))
    assert result.status is CheckStatus.FAIL
    assert result.problems == (f"the trainer never logged kl ({grpo_uneven.spec.split_label})",), result.problems
    seen = statuses(result)
    assert "kl" not in seen
    assert seen == {name: {MetricStatus.PASS} for name in statuses(whole) if name != "kl"}, seen


def test_a_metric_left_out_and_another_wrong_are_both_named(grpo_uneven):
    def change(log):
        log.pop("kl")
        log["entropy"] += 0.5

    result = grpo_with(grpo_uneven, change)
    assert not result.passed
    assert any(p.startswith("the trainer never logged kl (") for p in result.problems), result.problems
    assert "1 metric(s) disagree: entropy @ log 1" in result.problems, result.problems
    seen = statuses(result)
    assert seen["entropy"] == {MetricStatus.FAIL} and seen["policy_loss"] == {MetricStatus.PASS}


def test_every_metric_left_out_is_named_in_one_line_with_the_logs_that_lack_it(grpo_uneven):
    logs = [dict(log) for log in grpo_uneven.ran.logs]
    for log in logs:
        log.pop("kl")
    logs[0].pop("clip_ratio/high_max")
    broken = Observation(grpo_uneven.spec, ran(logs, recorded(grpo_uneven.ran).loss_inputs))
    result = grpo_check(GRPO_CHECK, FixedCache.of(broken))
    never = [p for p in result.problems if "never logged" in p]
    assert never == [f"the trainer never logged kl, clip_ratio/high_max in log 1 ({grpo_uneven.spec.split_label})"]
    assert statuses(result)["clip_ratio/high_max"] == {MetricStatus.PASS}  # in log 2, which logged it


def test_an_optional_metric_the_target_does_not_declare_is_a_note_not_a_failure(grpo_uneven):
    result = grpo_with(grpo_uneven, lambda log: log.pop("policy_loss"))
    assert result.passed and any("policy_loss is not logged" in n for n in result.notes)


def test_ppo_a_metric_left_out_fails_naming_it_and_the_others_are_still_compared():
    obs = reference("ppo").get(ppo_scenarios.spec_for(ppo_scenarios.UNEVEN, ScenarioSpec()))
    run = ScenarioSpec()
    whole = case("uneven_split[epochs=1]").run(_Fixed(obs), run)
    assert whole.passed
    logs = [dict(log) for log in obs.ran.logs]
    for log in logs:
        log.pop("val/ratio")
        log["policy/entropy_avg"] += 0.5
    broken = Observation(obs.spec, dataclasses.replace(obs.ran, logs=tuple(logs)))
    result = case("uneven_split[epochs=1]").run(_Fixed(broken), run)
    assert not result.passed
    assert f"the trainer never logged val/ratio ({obs.spec.split_label})" in result.problems, result.problems
    assert any("disagree: policy/entropy_avg" in p for p in result.problems), result.problems
    seen = statuses(result)
    assert "val/ratio" not in seen and seen["policy/entropy_avg"] == {MetricStatus.FAIL}
    passing = {name for name, s in seen.items() if s == {MetricStatus.PASS}}
    assert passing == set(statuses(whole)) - {"val/ratio", "policy/entropy_avg"}, passing


class _Fixed:
    """Every spec gets `obs`."""

    def __init__(self, obs):
        self.obs, self.target = obs, None

    def get(self, spec, spy=True):
        return self.obs
