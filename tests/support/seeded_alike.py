"""A reference trainer whose ranks sample with one random stream, without patching its source: each rank's global
random state reset to the run's seed as training starts (class 87's bug). `seeded_alike_target` makes the factory
a test hands to verify-dist; `assert_sampling_alone_fails` holds verify-dist's verdict on it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from tests.support.gate_run import verify_dist


def seeded_alike_target(module: str, algorithm: str) -> Callable[..., Any]:
    """The factory of `module` (a reference target), each run's ranks reseeded alike before it trains."""

    def seeded_alike(spec, accelerator=None):
        from transformers import set_seed

        run = importlib.import_module(module).factory(spec, accelerator)
        train = run.train

        def alike():
            set_seed(spec.seed)
            return train()

        run.train = alike
        return run

    seeded_alike.algorithm = algorithm
    return seeded_alike


def assert_sampling_alone_fails(tmp_path, target: str) -> None:
    """verify-dist on `target` ('module:factory') exits 1 with `sampling[ranks=2]` its only failure, saying why."""
    code, report, output = verify_dist(tmp_path, target)
    assert code == 1, output[-3000:]
    checks = {c["id"]: c for c in report["checks"]}
    assert {i for i, c in checks.items() if c["status"] == "fail"} == {"sampling[ranks=2]"}, output[-3000:]
    assert "the same random stream" in checks["sampling[ranks=2]"]["message"]
