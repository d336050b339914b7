"""The gate itself: exit codes, failing loudly on what it did not see, and a mean-of-means trainer."""

from __future__ import annotations

import math
import re

import pytest

from harness.algorithms import case, cases
from harness.algorithms.ppo.contract import POOLED_STATS, ROLLOUT
from harness.algorithms.ppo.instruments import PPORecords
from harness.algorithms.ppo.scenarios import pooled as scenarios
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.instrument.grad import GradTrace
from harness.instrument.observe import Observation, Ran
from tests.support.gate_run import verify
from tests.support.gates import gate, observations, reference

# ------------------------------------------------------------------ exit codes


def test_unknown_target_exits_2_with_one_line(tmp_path):
    code, _, output = verify(tmp_path, "--target", "nope")
    assert code == 2
    assert output.strip().splitlines() == [
        "error: unknown target 'nope': use one of openrlhf, reference, reference-grpo, trl, trl-grpo, verl, "
        "trl:MODULE, trl-grpo:MODULE or 'package.module:factory'"
    ]


def test_trainer_module_without_the_spied_functions_exits_2(tmp_path):
    code, report, output = verify(
        tmp_path, "--target", "tests.support.gate_variants:no_spy_functions", "-k", "uneven_split"
    )
    assert code == 2, output[-2000:]
    assert "masked_mean" in output and "Traceback" not in output


def test_adapter_that_returns_no_run_exits_2(tmp_path):
    code, _, output = verify(tmp_path, "--target", "tests.support.gate_variants:not_a_run", "-k", "freshness")
    assert code == 2, output[-2000:]
    assert "lacks 'module'" in output


def test_dropout_is_a_setting_in_zero_to_one():
    from harness.algorithms.ppo.spec import parse_settings
    from harness.errors import HarnessConfigError

    assert parse_settings(["dropout=0.1", "temperature=0.7"]) == {"dropout": 0.1, "temperature": 0.7}
    for bad in ("dropout=1", "dropout=-0.1", "dropout=some"):
        with pytest.raises(HarnessConfigError, match="dropout"):
            parse_settings([bad])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_device_is_a_usage_error_not_a_pass(tmp_path):
    code, _, output = verify(tmp_path, "--device", "cuda")
    assert code == 2 and "no CUDA device" in output


# ------------------------------------------------------------------ a broken trainer


def test_mean_of_means_trainer_fails_the_pooled_checks(tmp_path):
    code, report, output = verify(
        tmp_path,
        "--target",
        "tests.support.gate_variants:mean_of_means",
        "-k",
        "uneven_split or partition or freshness",
    )
    assert code == 1, output[-2000:]
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert status["uneven_split[epochs=1]"] == status["uneven_split[epochs=2]"] == "fail"
    assert status["freshness"] == "fail"
    assert status["partition_invariance"] == "fail"
    # one line per check: its status, its id, its first failing metric
    assert re.search(r"^FAIL  uneven_split\[epochs=1\] +FAIL uneven_split loss/policy_avg: logged=", output, re.M)
    assert not re.search(r"^check +metric +logged", output, re.M)  # the metric table only with -v


# ------------------------------------------------------------------ nothing seen is a failure


class FixedCache:
    """Stands in for ObservationCache: every spec yields the same prepared observation."""

    def __init__(self, obs: Observation) -> None:
        self.obs = obs

    def get(self, spec, spy: bool = True) -> Observation:
        return self.obs


def observation(spec: ScenarioSpec, logs, records=()) -> Observation:
    ran = Ran(tuple(logs), GradTrace(), pad_token_id=0, stop_token_id=1, payload=PPORecords(tuple(records)))
    return Observation(spec, ran)


GOOD_LOGS = {n: 0.5 for n in POOLED_STATS + ROLLOUT}


def check(check_id: str, cache, run=None):
    """The result of check `check_id` of the PPO gate on `cache`."""
    return case(check_id).run(cache, run or ScenarioSpec())


def test_no_spy_records_fail_the_oracle_checks():
    cache = FixedCache(observation(scenarios.UNEVEN, [dict(GOOD_LOGS), dict(GOOD_LOGS)]))
    for result in (check("freshness", cache), check("rollout_objectives[rollout=uneven_split]", cache)):
        assert not result.passed and "recorded no calls" in result.message


def test_a_missing_metric_fails():
    logs = {k: v for k, v in GOOD_LOGS.items() if k != "val/ratio"}
    result = check("lr0_ratio[epochs=1]", FixedCache(observation(scenarios.LR0, [logs])))
    assert not result.passed and "never logged val/ratio" in result.message


def test_a_nan_metric_fails():
    logs = dict(GOOD_LOGS, **{"val/ratio": math.nan, "val/ratio_var": 0.0, "policy/approxkl_avg": 0.0})
    logs["policy/clipfrac_avg"] = 0.0
    result = check("lr0_ratio[epochs=1]", FixedCache(observation(scenarios.LR0, [logs])))
    assert not result.passed and "val/ratio=nan" in result.message


def test_a_logged_value_that_is_not_a_number_fails_not_raises():
    """A logged string fails the check saying so (`float(x)` raised on it: a harness error, ValueError)."""
    logs = dict(GOOD_LOGS, **{"val/ratio": "high", "val/ratio_var": 0.0, "policy/approxkl_avg": 0.0})
    logs["policy/clipfrac_avg"] = 0.0
    result = check("lr0_ratio[epochs=1]", FixedCache(observation(scenarios.LR0, [logs])))
    assert not result.passed and "logged values that are not numbers val/ratio='high'" in result.message


def test_no_optimizer_step_fails_the_gradient_checks():
    cache = FixedCache(observation(scenarios.LR0, [dict(GOOD_LOGS)]))
    assert not check("gradient_partition", cache).passed
    assert not check("every_microbatch_applied[epochs=2]", cache).passed


def test_a_crashed_run_fails_every_check_that_reads_it():
    from harness.instrument.observe import Crashed

    cache = FixedCache(Observation(scenarios.UNEVEN, Crashed("RuntimeError: boom")))
    for c in cases("ppo"):
        result = c.run(cache, ScenarioSpec())
        assert not result.passed and "RuntimeError: boom" in result.message, c.id


def test_an_exception_inside_a_check_fails_that_check_and_keeps_its_row(monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("row 3")

    monkeypatch.setattr(scenarios, "oracle_update", broken)
    result = check("uneven_split[epochs=1]", FixedCache(observation(scenarios.UNEVEN, [dict(GOOD_LOGS)])))
    assert not result.passed and str(result.id) == "uneven_split[epochs=1]"
    assert result.message == "harness error: KeyError: 'row 3'"


# ------------------------------------------------------------------ the GPU session's paths, on CPU


def test_the_reference_trainer_passes_every_check_of_the_gate():
    """The whole PPO gate (`python -m harness verify`'s checks, in process; its runs shared with the modules that
    read the same scenarios). tests/harness/algorithms/ppo/targets/test_trl_verdict.py holds TRL's verdict to the
    same checks, and so relies on this test for the reference's."""
    report = gate("reference")
    assert report["algorithm"] == "ppo" and len(report["checks"]) == len(cases("ppo"))
    failed = [f"{c['id']}: {c['message']}" for c in report["checks"] if c["status"] != "pass"]
    assert report["status"] == "pass" and not failed, failed


@pytest.mark.slow
def test_bfloat16_passes_with_its_own_tolerances():
    """The whole gate in bfloat16 (float64's whole gate runs three times, at three seeds, with clipping and
    temperature 0.7: test_ppo_precision.py)."""
    dtype = "bfloat16"
    report = gate("reference", dtype=dtype)
    assert report["dtype"] == dtype and report["status"] == "pass", [
        c["id"] for c in report["checks"] if c["status"] != "pass"
    ]
    assert len(report["checks"]) == len(cases("ppo"))


SOME = ("uneven_split[epochs=1]", "uneven_split[epochs=2]", "freshness", "rollout_objectives[rollout=uneven_split]",
        "partition_invariance")  # fmt: skip


@pytest.mark.slow
def test_same_seed_same_verdicts_and_numbers(tmp_path):
    """A gate run as a user runs it (its own process) and the same checks run in this one: the same verdicts and
    the same numbers, to the last digit."""
    code, report, output = verify(tmp_path, *(f"--check={c}" for c in SOME))
    assert code == 0, output[-2000:]
    assert report == gate("reference", checks=SOME) and len(report["checks"]) == len(SOME)


# ------------------------------------------------------------------ checks and preconditions, in process


@pytest.fixture(scope="module")
def reference_cache():
    return reference("ppo")


@pytest.mark.parametrize(
    "check_id, helper, why",
    [
        ("uneven_split[epochs=1]", "padded_rows", "no response was padded"),
        ("all_masked", "empty_micro_batches", "no all-masked micro-batch was seen"),
        ("empty_update", "empty_micro_batches", "some response was not empty"),
    ],
)
def test_a_run_that_lacks_what_the_scenario_needs_fails(reference_cache, monkeypatch, check_id, helper, why):
    from harness.algorithms.ppo.view import UpdateView

    assert check(check_id, reference_cache).passed  # the real run has what it needs
    fake = (lambda update: []) if check_id != "empty_update" else (lambda update: [0])
    monkeypatch.setattr(UpdateView, helper, fake)
    result = check(check_id, reference_cache)
    assert not result.passed and why in result.message and "did not test what it should" in result.message


def test_a_wrong_mask_passed_to_masked_mean_is_named():
    from tests.support.gate_variants import value_stats_on_the_response_mask

    result = check("uneven_split[epochs=1]", observations(value_stats_on_the_response_mask))
    assert not result.passed
    assert "site 'vf_loss': mask" in result.message and "the oracle's V mask" in result.message
    assert {m.name for m in result.metrics if m.failed} >= {"loss/value_avg", "val/clipfrac_avg"}


def test_nan_for_an_update_with_no_response_token_fails():
    from tests.support.gate_variants import nan_when_nothing_to_average

    cache = observations(nan_when_nothing_to_average)
    assert check("uneven_split[epochs=1]", cache).passed  # the variant is right where tokens exist
    result = check("empty_update", cache)
    assert not result.passed and "non-finite logged values loss/policy_avg=nan" in result.message


def test_a_weight_left_non_finite_by_a_step_fails_whatever_was_logged():
    from tests.support.gate_variants import nan_weight_at_the_last_step

    cache = observations(nan_weight_at_the_last_step)
    for check_id in ("uneven_split[epochs=1]", "freshness"):
        result = check(check_id, cache)
        assert not result.passed, check_id
        assert "non-finite weights in 1 parameter tensor(s)" in result.message, result.message
        assert "non-finite gradient" not in result.message and "non-finite logged" not in result.message


def test_ppo_verify_script_is_the_verify_command(capsys):
    from harness.cli import verify_main

    assert verify_main(["--target", "nope"]) == 2
    assert "unknown target 'nope'" in capsys.readouterr().err


def test_training_signal_fails_when_it_never_saw_the_raw_advantages():
    """Not a pass on nothing: without the whitening call the per-token losses cannot be checked, and the check fails."""
    from tests.support.gate_variants import whitening_not_seen

    result = check("training_signal[epochs=1]", observations(whitening_not_seen))
    assert not result.passed
    unseen = [m for m in result.metrics if m.status == "not_recomputable"]
    assert {m.name for m in unseen} == {"per_token/pg_loss", "per_token/pg_clipfrac", "per_token/advantages_raw"}
    assert all("raw advantages are unknown" in m.reason or "whitening function" in m.reason for m in unseen)


def test_training_signal_fails_when_it_never_saw_the_values():
    """Not a pass on nothing: a target that exposes no value head leaves the value side unchecked, and it fails."""
    from tests.support.gate_variants import value_head_hidden

    result = check("training_signal[epochs=1]", observations(value_head_hidden))
    assert not result.passed
    unseen = {m.name: m.reason for m in result.metrics if m.status == "not_recomputable"}
    assert set(unseen) == {"per_token/advantages_raw", "per_token/vf_loss", "per_token/vf_clipfrac"}
    assert all("value_head" in reason for reason in unseen.values())


def test_logp_gradient_fails_when_it_never_saw_the_values():
    """Not a pass on nothing: without a value head, dL/dv is unseen and logp_gradient fails on it."""
    from tests.support.gate_variants import value_head_hidden

    result = check("logp_gradient[run=lr0_uneven]", observations(value_head_hidden))
    assert not result.passed
    unseen = {m.name: m.reason for m in result.metrics if m.status == "not_recomputable"}
    assert set(unseen) == {"gradient/value"} and "value_head" in unseen["gradient/value"]


def test_a_reward_model_whose_head_was_never_recorded_fails_loudly():
    """Not a pass on nothing: a target that exposes a reward model the trainer never called leaves the scores
    unknown, and the checks that read them fail (not the optional 'no scores' of a target that shows none)."""
    from tests.support.gate_variants import reward_model_unseen

    cache = observations(reward_model_unseen)
    sweep = "settings_sweep[settings=reward_model,check={}]"
    for check_id, names in (
        (sweep.format("rollout_objectives"), {"objective/scores", "objective/rlhf_reward"}),
        (sweep.format("training_signal"), {"per_token/advantages_raw"}),
    ):
        result = check(check_id, cache)
        assert not result.passed
        unseen = {m.name: m for m in result.metrics if m.status == "not_recomputable"}
        assert names <= set(unseen), check_id
        assert all(unseen[n].failed and "no reward-head forward was recorded" in unseen[n].reason for n in names)


@pytest.mark.parametrize(
    ("variant", "says"),
    [
        ("oversampling", "the rollout sampled 24 responses, expected 12"),
        ("responses_past_response_length", "responses 15 tokens wide, longer than response_length 12"),
    ],
)
def test_a_rollout_of_another_size_than_the_spec_s_fails_every_check_that_reads_it(variant, says):
    import tests.support.gate_variants as variants

    result = check("uneven_split[epochs=1]", observations(getattr(variants, variant)))
    assert not result.passed and says in result.message
