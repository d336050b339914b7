"""What every scenario of every algorithm checks before it judges anything: the run finished, finite, and
showed what the scenario exists for. Each records why on the `Check` it is given, so that a check that saw
nothing never passes.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from harness.instrument.observe import Observation, Ran
from harness.oracle.numbers import as_float
from harness.verdict import Check

RAISED = "the trainer raised during the run"
"""How a check's message begins when the trainer raised instead of finishing its run (mutants/verdicts.py reads it)."""


def require_ran(obs: Observation, check: Check) -> Ran | None:
    """The finished run, or None after failing the check with what the trainer raised.

    A run that finished with a NaN or inf in a gradient at a step, or in the weights after one,
    fails too, whatever it logged: every scenario checks it.
    """
    if obs.error:
        check.fail(f"{RAISED} ({obs.spec.split_label}): {obs.error}")
    ran = obs.ran
    if ran is not None:
        for k, step in enumerate(ran.grads.steps):
            if step.nonfinite_grads:
                check.fail(f"step {k + 1} ({obs.spec.split_label}): non-finite gradient in {step.nonfinite_grads} "
                           "parameter tensor(s)")  # fmt: skip
        for k, bad in enumerate(ran.grads.nonfinite_weights):
            if bad:
                check.fail(f"after step {k + 1} ({obs.spec.split_label}): non-finite weights in {bad} parameter "
                           "tensor(s)")  # fmt: skip
    return ran


def require(check: Check, condition: object, missing: str) -> bool:
    """True when `condition` holds; else the check fails: the run did not test what the scenario is for."""
    if not condition:
        check.fail(f"{missing}: the scenario did not test what it should")
    return bool(condition)


def require_logged(check: Check, logs: Mapping[str, object], names: Sequence[str], where: str,
                   lacking: Collection[str] = ()) -> bool:  # fmt: skip
    """True when `logs` holds every one of `names` but those in `lacking` (which it may leave out), each a finite
    number; else the check fails, each reason beginning with `where`: the names never logged, the values that are
    not numbers (a string, a tensor of more than one element) and the non-finite ones."""
    missing = [n for n in names if n not in logs and n not in lacking]
    numbers = {n: as_float(logs[n]) for n in names if n in logs}
    strange = [f"{n}={logs[n]!r}" for n, x in numbers.items() if x is None]
    bad = [f"{n}={logs[n]}" for n, x in numbers.items() if x is not None and not math.isfinite(x)]
    if missing:
        check.fail(f"{where}: the trainer never logged {', '.join(missing)}")
    if strange:
        check.fail(f"{where}: logged values that are not numbers {', '.join(strange)}")
    if bad:
        check.fail(f"{where}: non-finite logged values {', '.join(bad)}")
    return not (missing or strange or bad)
