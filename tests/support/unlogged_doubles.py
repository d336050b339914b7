"""A target's factory whose trainer does not log some metrics: the reference's runs with those left out of every
log, and the attributes the factory declares (`algorithm`, `unlogged_metrics`, ...); one check's verdict on it."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

NOTE = "not logged, as the target declares (unlogged_metrics): "
"""How a check's note on the metrics it left out begins (harness/unlogged.py)."""


def without(factory: Callable, *names: str, **declares: object) -> Callable:
    """`factory` whose runs log nothing under `names` (fnmatch patterns: `rewards/*/mean`), with `declares` set as its
    attributes."""

    def dropping(spec):
        run = factory(spec)
        train = run.train
        kept = lambda log: {k: v for k, v in log.items() if not any(fnmatch.fnmatchcase(k, n) for n in names)}  # noqa: E731
        run.train = lambda: [kept(log) for log in train()]
        return run

    for key, value in declares.items():
        setattr(dropping, key, value)
    return dropping


def verdict(target: str, check: str) -> dict:
    """verify.json's entry for `check` of `target` (`module:factory`), from the gate run in this process."""
    from tests.support.gates import gate

    return next(c for c in gate(target, checks=(check,))["checks"] if c["id"] == check)


def fails_unless_declared(silent: str, declared: str, check: str, metric: str) -> set[str]:
    """The names `check` compared on target `declared`, after asserting that it fails target `silent`, whose trainer
    does not log `metric`, naming it, and passes `declared`, the same trainer declaring it not logged, with the note."""
    said = verdict(silent, check)
    assert said["status"] == "fail" and f"the trainer never logged {metric}" in said["message"], said["message"]
    passed = verdict(declared, check)
    assert passed["status"] == "pass" and NOTE + metric in passed["message"], passed["message"]
    return {m["name"] for m in passed["metrics"]}
