"""The `trl` target builds TRL's PPOTrainer on the toy world and reports what TRL logs."""

import sys

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.trl

import torch  # noqa: E402

from harness.algorithms.ppo.contract import POOLED_STATS, ROLLOUT  # noqa: E402
from harness.algorithms.ppo.runs import LR0  # noqa: E402
from harness.algorithms.ppo.targets import trl as trl_target  # noqa: E402
from harness.errors import HarnessConfigError  # noqa: E402

# 12 rollout rows, two minibatches of 6, micro-batches of 4 then 2: each minibatch fills two
# of the three gradient-accumulation slots of TRL's stats grid, the third stays 0.
UNEVEN_LR0 = LR0
assert (UNEVEN_LR0.per_device_train_batch_size, UNEVEN_LR0.gradient_accumulation_steps) == (4, 3)
assert (UNEVEN_LR0.num_mini_batches, UNEVEN_LR0.num_ppo_epochs, UNEVEN_LR0.learning_rate) == (2, 1, 0.0)


@pytest.fixture(scope="module")
def uneven_run():
    run = trl_target.factory(UNEVEN_LR0)
    return run, run.train()


def test_surface_matches_the_target_protocol(uneven_run):
    run, _ = uneven_run
    assert run.module.__name__ == "trl.experimental.ppo.ppo_trainer"
    assert callable(run.module.masked_mean) and callable(run.module.selective_log_softmax)
    assert type(run.optimizer).__module__.startswith("torch.optim")
    assert run.params and all(p.requires_grad for p in run.params)
    held = {id(p) for group in run.optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in run.params}
    assert (run.pad_token_id, run.stop_token_id) == (0, 1)


def test_one_metrics_dict_per_update_with_trl_names(uneven_run):
    _, metrics = uneven_run
    assert len(metrics) == UNEVEN_LR0.total_updates
    logged = metrics[0]
    for name in POOLED_STATS + ROLLOUT:
        assert name in logged, name
    assert all("/" in key for key in logged)
    assert all(isinstance(value, float) for value in logged.values())


def test_lr0_uneven_split_ratio_pools_the_empty_slot(uneven_run):
    _, metrics = uneven_run
    # slots [1, 1, 0, 1, 1, 0]: mean 2/3, unbiased variance 4/15
    assert metrics[0]["val/ratio"] == pytest.approx(2 / 3, abs=1e-3)
    assert metrics[0]["val/ratio_var"] == pytest.approx(4 / 15, abs=1e-3)


def test_train_runs_once(uneven_run):
    run, _ = uneven_run
    with pytest.raises(RuntimeError):
        run.train()


def test_missing_trl_is_a_config_error(monkeypatch):
    for name in [m for m in sys.modules if m == "trl" or m.startswith("trl.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(HarnessConfigError, match=r"trl==1\.12\.0"):
        trl_target.factory(UNEVEN_LR0)


def test_cuda_without_cuda_is_a_config_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(HarnessConfigError, match="CUDA"):
        trl_target.factory(UNEVEN_LR0.with_(device="cuda"))
