"""tinyppo's own tests, using the fixtures of the ppo-stats-harness pytest plugin.

`ppo_spy` watches the trainer module's two functions; `ppo_cache` runs the target named by
`--ppo-target` (pyproject.toml sets it to tinyppo.target:factory) once per scenario spec;
`ppo_run_spec` carries `--ppo-seed`, `--ppo-device`, `--ppo-dtype`; `ppo_report` collects
check results into reports/verify.json and the terminal verdict.
"""

from __future__ import annotations

import pytest
from tinyppo import broken, target, trainer

from harness.algorithms import case
from harness.algorithms.ppo.contract import LOGPROB_ROLES, MICRO_BATCH_ROLES
from harness.algorithms.ppo.spec import ScenarioSpec
from harness.instrument.observe import ObservationCache
from harness.report import assert_passed, check_failure_lines


def test_the_site_map_names_every_call_site(ppo_spy):
    run = target.factory(ScenarioSpec(total_updates=1))
    with ppo_spy(run.module) as spy:
        logs = run.train()
    roles = {run.site_map.role(record) for record in spy.calls()}
    assert set(LOGPROB_ROLES + MICRO_BATCH_ROLES) <= roles
    assert len(spy.calls(name="cur_lp")) == 4  # 4 + 2 rows per minibatch, two minibatches
    assert logs[0]["val/ratio"] > 0


@pytest.mark.parametrize("check_id", ["uneven_split[epochs=1]", "lr0_ratio[epochs=2]", "gradient_partition"])
def test_gate_checks_pass(check_id, ppo_cache, ppo_run_spec, ppo_report):
    assert_passed(ppo_report.add(case(check_id).run(ppo_cache, ppo_run_spec)))


def test_the_gate_catches_a_mean_of_pass_means(ppo_run_spec):
    result = case("uneven_split[epochs=1]").run(ObservationCache(broken.factory), ppo_run_spec)
    assert not result.passed
    assert any(line.startswith("FAIL uneven_split loss/policy_avg:") for line in check_failure_lines(result))


def test_settings_reject_a_batch_that_does_not_split():
    with pytest.raises(ValueError, match="multiple of minibatches"):
        trainer.Settings(batch_rows=12, minibatches=5)
