"""What every scenario of every algorithm checks before it judges anything: the run finished, finite, and
showed what the scenario exists for. Each records why on the `Check` it is given, so that a check that saw
nothing never passes.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from harness.instrument.observe import Observation, Ran
from harness.oracle.numbers import as_float, finite_float
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


def require_logged(check: Check, logs: Sequence[Mapping[str, object]], names: Sequence[str], split: str,
                   unit: str = "log", lacking: Mapping[int, Collection[str]] | None = None) -> bool:  # fmt: skip
    """True when every one of `logs` holds every one of `names` (but those its `lacking` may leave out) as a finite
    number; else the check fails, naming every name that is not: in one line the names some log never has, with the
    `unit`s that lack each unless every one does; in one line per log its values that are not numbers (a string, a
    tensor of more than one element), in another its non-finite ones. `split` names the run. It never stops the
    check: the caller compares what was logged (`usable`), each metric with its own verdict."""
    absent: dict[str, list[int]] = {}
    ok = True
    for i, log in enumerate(logs):
        may = (lacking or {}).get(i, ())
        for name in names:
            if name not in log and name not in may:
                absent.setdefault(name, []).append(i + 1)
        numbers = {n: as_float(log[n]) for n in names if n in log}
        strange = [f"{n}={log[n]!r}" for n, x in numbers.items() if x is None]
        bad = [f"{n}={log[n]}" for n, x in numbers.items() if x is not None and not math.isfinite(x)]
        ok = ok and not (strange or bad)
        if strange:
            check.fail(f"{unit} {i + 1} ({split}): logged values that are not numbers {', '.join(strange)}")
        if bad:
            check.fail(f"{unit} {i + 1} ({split}): non-finite logged values {', '.join(bad)}")
    if absent:
        said = [n if len(at) == len(logs) else f"{n} in {unit}{'s' if len(at) > 1 else ''} {', '.join(map(str, at))}"
                for n, at in absent.items()]  # fmt: skip
        check.fail(f"the trainer never logged {', '.join(said)} ({split})")
    return ok and not absent


def usable(log: Mapping[str, object], names: Sequence[str]) -> list[str]:
    """Those of `names` that `log` holds as a finite number, in their order: what a check compares after
    `require_logged` named the others."""
    return [n for n in names if n in log and finite_float(log[n]) is not None]
