"""The steps every PPO scenario takes before it judges anything: the run finished, logged, and looked as expected.

Each `require_*` records why on the `Check` it is given and returns None or False when the
run did not show what the scenario needs, so that a check that saw nothing never passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.compare import compare
from harness.instrument.observe import Observation, Ran
from harness.require import require_logged, require_ran, usable
from harness.tolerances import tolerance
from harness.unlogged import leave_out
from harness.verdict import Check

from ..contract import POOLED_STATS
from ..instruments import recorded
from ..oracle.expect import expected_metrics
from ..tolerances import TOLERANCES
from ..view import RunView, UpdateView, view_of
from ..wrong.poolings import diagnose_pooled


def logprob_problems(ran: Ran, dtype: str) -> list[str]:
    """Where a `selective_log_softmax` call returned other than log_softmax(logits)[index] (beyond tolerance)."""
    tol = tolerance("logprob", dtype, TOLERANCES)
    problems = []
    for record in recorded(ran).records:
        gap = getattr(record, "logprob_gap", None)
        if gap is None or gap.numel() == 0:
            continue
        worst = float(gap.max())
        if not worst <= tol.abs_tol:  # NaN fails too
            where = tuple(int(i) for i in (gap == gap.max()).nonzero()[0].tolist()) if worst == worst else ()
            problems.append(
                f"selective_log_softmax at site {record.site.name!r} returned log-probs off log_softmax(logits)[index] "
                f"by {worst:.3g} at {where} (tolerance {tol.abs_tol:.3g})"
            )
    return problems


def require_logs(obs: Observation, names: Sequence[str], check: Check, unlogged: Sequence[str] = ()) -> bool:
    """True when the run finished with one log per update; each update's metrics not logged as finite numbers among
    `names` fail the check, named (`require_logged`), without stopping it: the caller compares the rest (`usable`).
    Those the target declares its trainer does not log (`unlogged`) are left out, with a note; one it logs anyway
    fails the check (harness/unlogged.py `leave_out`)."""
    ran = require_ran(obs, check)
    if ran is None:
        return False
    if len(ran.logs) != obs.spec.total_updates:
        check.fail(f"expected {obs.spec.total_updates} logged update(s), saw {len(ran.logs)}")
        return False
    names = leave_out(check, ran.logs, names, unlogged, obs.spec.split_label)
    require_logged(check, ran.logs, names, obs.spec.split_label, "update")
    return True


def require_view(obs: Observation, check: Check) -> RunView | None:
    """The oracle's view of the run's records, after checking it saw the updates and micro-batches it expected."""
    ran = require_ran(obs, check)
    if ran is None:
        return None
    if not recorded(ran).records:
        check.fail("the spy recorded no calls")
        return None
    problems = logprob_problems(ran, obs.spec.dtype)
    for problem in problems[:3]:
        check.fail(problem)
    if problems:
        return None
    view = view_of(obs)
    if len(view.updates) != obs.spec.total_updates:
        check.fail(f"spy saw {len(view.updates)} update(s), expected {obs.spec.total_updates}")
        return None
    want, samples = obs.spec.expected_rows(), obs.spec.local_batch_size
    for i, update in enumerate(view.updates):
        if update.geometry != want:
            check.fail(f"update {i + 1}: micro-batch rows {update.geometry}, expected {want}")
            return None
        if update.rollout is not None and update.rollout.samples != samples:
            check.fail(f"update {i + 1}: the rollout sampled {update.rollout.samples} responses, expected {samples} "
                       f"(per_device_train_batch_size * gradient_accumulation_steps * num_mini_batches)")  # fmt: skip
            return None
        width = update.rollout.responses.shape[-1] if update.rollout is not None else 0
        if width > obs.spec.response_length:
            check.fail(f"update {i + 1}: responses {width} tokens wide, longer than response_length "
                       f"{obs.spec.response_length} (a position past it is no response token, and V must not reach "
                       f"it)")  # fmt: skip
            return None
    return view


def oracle_update(obs: Observation, index: int, check: Check, names: Sequence[str] = POOLED_STATS,
                  unlogged: Sequence[str] = ()) -> UpdateView | None:  # fmt: skip
    """Update `index`'s view, when the run has the expected geometry and logged every update (the metrics of `names`
    it did not log as finite numbers fail the check, named, but those of `unlogged`, which the target declares its
    trainer does not log: `compare_pooled` compares the others)."""
    view = require_view(obs, check)
    if view is None or not require_logs(obs, names, check, unlogged):
        return None
    return view.updates[index]


def compare_pooled(obs: Observation, update: UpdateView, check: Check, names: Sequence[str] = POOLED_STATS,
                   earlier: UpdateView | None = None) -> None:  # fmt: skip
    """Update `update.index`'s logged metrics against the oracle fed that update's records alone; masks too.

    `earlier`: the previous update, whose records only a diagnosis reads (did they leak into this one?).
    """
    for problem in update.mask_problems():
        check.fail(f"update {update.index + 1}: {problem}")
    expected = expected_metrics(update, obs.spec.kl_coef, obs.spec.kl_estimator, None, obs.spec.missing_eos_penalty)
    logged = obs.ran.logs[update.index]
    names = usable(logged, names)  # require_logs named the others
    verdicts = compare({n: logged[n] for n in names}, {n: expected[n] for n in names}, obs.spec.dtype, TOLERANCES)
    previous = earlier.micro_batches if earlier is not None else ()
    check.absorb(diagnose_pooled(verdicts, update.micro_batches, obs.spec, previous))
