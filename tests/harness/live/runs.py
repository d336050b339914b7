"""The TRL runs the live-mode tests check: TRL's GRPOTrainer on the toy world (harness/algorithms/grpo/targets/trl),
skipped where TRL's GRPO trainer does not import."""

from __future__ import annotations

import pytest

TIMINGS = ("step_time",)
"""What TRL logs of the wall clock (seconds per step), the one logged value a run does not repeat."""


def trl_run(spec, extra=None):
    """TRL's GRPOTrainer for `spec` (`extra`: more GRPOConfig settings)."""
    pytest.importorskip("trl")
    pytest.importorskip("trl.trainer.grpo_trainer", reason="TRL's GRPO trainer does not import (it needs `requests`)")
    from harness.algorithms.grpo.targets import trl as trl_grpo

    return trl_grpo.build(spec, extra=extra)


def train_trl(run) -> list[dict]:
    """Train it quietly; every training log's metrics."""
    from harness.targets.hf import quiet

    with quiet():
        run.trainer.train()
    return [dict(m) for m in run._metrics]


def trained(logs: list[dict]) -> list[dict]:
    """What the trainer itself logged: all but the live check's keys and the wall clock."""
    return [{k: v for k, v in m.items() if not k.startswith("live/") and k not in TIMINGS} for m in logs]
