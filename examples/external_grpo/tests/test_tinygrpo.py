"""tinygrpo's own tests, using the fixtures of the ppo-stats-harness pytest plugin.

`ppo_cache` runs the target named by `--ppo-target` (pyproject.toml sets it to
tinygrpo.target:factory) once per scenario spec; `ppo_run_spec` carries `--ppo-seed`,
`--ppo-device`, `--ppo-dtype` (a `GRPOSpec`, since the target declares `algorithm = "grpo"`);
`ppo_report` collects check results into reports/verify.json and the terminal verdict.
"""

from __future__ import annotations

import pytest
import torch
from tinygrpo import broken, target, trainer

from harness.algorithms import case
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import ObservationCache
from harness.report import assert_passed, check_failure_lines


def test_the_recorder_keeps_one_record_per_pass():
    # one generation of 16 completions, trained in two windows of 2 passes of 4, logged after each
    spec = GRPOSpec(steps_per_generation=4, max_steps=2, reward_weights=(1.0, -0.5))
    run = target.factory(spec)
    logs = run.train()
    assert [r.window for r in run.loss_inputs] == [0, 0, 1, 1]
    assert all(r.logp_grad is not None and r.logit_gaps.logps < 1e-5 for r in run.loss_inputs)
    assert all(r.old_logps is not None and r.ref_logps is not None for r in run.loss_inputs)  # two windows, beta
    assert sorted(torch.cat([r.completions for r in run.loss_inputs]).tolist()) == list(range(16))
    assert [(c.function, c.generation, len(c.scores)) for c in run.reward_calls] == [
        ("sevens", 0, 16),
        ("stops", 0, 16),
    ]
    assert len(logs) == 2 and {"entropy", "kl", "clip_ratio/high_max", "rewards/stops/mean"} <= set(logs[0])


def test_the_mask_keeps_a_pad_before_the_stop_token():
    stop = 1  # the pad is 0: the first row drew one before its stop token, and it counts
    ids = torch.tensor([[5, 0, 1, 0], [5, 6, 7, 8], [1, 0, 0, 0]])
    mask, stopped = trainer.completion_mask(ids, stop, drop_truncated=False)
    assert mask.int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert stopped.tolist() == [True, False, True]
    assert trainer.completion_mask(ids, stop, drop_truncated=True)[0].sum(dim=1).tolist() == [3, 0, 1]


@pytest.mark.parametrize(
    "check_id",
    [
        "short_window",
        "all_masked",
        "logp_gradient[loss_type=dapo]",
        "advantages[scale_rewards=group]",
        "completion_lengths",
    ],
)
def test_gate_checks_pass(check_id, ppo_cache, ppo_run_spec, ppo_report):
    assert_passed(ppo_report.add(case(check_id).run(ppo_cache, ppo_run_spec)))


def test_the_gate_catches_a_mean_of_pass_means(ppo_run_spec):
    result = case("short_window").run(ObservationCache(broken.factory), ppo_run_spec)
    assert not result.passed
    assert any(line.startswith("FAIL short_window entropy:") for line in check_failure_lines(result))


def test_settings_reject_a_generation_of_part_groups():
    with pytest.raises(ValueError, match="whole number of groups"):
        trainer.Settings(rows_per_pass=3, passes_per_step=1, group_size=4)
