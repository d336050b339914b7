"""GRPO across data-parallel ranks: the run each rank makes, and the checks on every rank's records pooled.

Each rank saves its `Ran` (logs and loss records); the parent checks that every interval's
logged metrics equal the oracle's value over the union of all ranks' records (TRL PR 6380
fixed a mean of per-rank means), after checking that a mean of per-rank values would differ; and that
each rank's gradient at its log-probs is the loss type's formula over every rank's tokens, times the
number of ranks (data parallelism averages the ranks' gradients).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import Ran
from harness.verdict import Check, CheckId, CheckResult

from . import gradients
from .contract import pooled_names
from .expect import expected_metrics, intervals
from .gradient_scenarios import judge
from .runs import UNEVEN
from .spec import GRPOSpec

ENTROPY = "entropy"
"""The metric whose per-rank values are compared with the pooled one to show the run has teeth."""


def rank_specs(seed: int) -> dict[str, GRPOSpec]:
    """The run every rank makes: two generations, each logged once (also the freshness of the second log)."""
    return {"uneven_lengths": UNEVEN.with_(seed=seed)}


def rank_checks(runs: dict[str, Sequence[Ran]]) -> list[CheckResult]:
    """uneven_lengths (log 1) and freshness (log 2) on the pooled records of every rank; logp_gradient on every
    rank's recorded gradients, against the formula with every rank's counts and the world factor."""
    ranks = runs["uneven_lengths"]
    spec = UNEVEN
    return [
        *(pooled_across_ranks(ranks, spec, index, CheckId(name, (("ranks", len(ranks)),)))
          for index, name in enumerate(("uneven_lengths", "freshness"))),
        logp_gradient_across_ranks(ranks, spec, CheckId("logp_gradient", (("ranks", len(ranks)),))),
    ]  # fmt: skip


def logp_gradient_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec, check_id: CheckId) -> CheckResult:
    """Each rank's dL/dlogp == world * the window weight over every rank's tokens * d l_t / d logp_t."""
    check = Check(check_id)
    if not all(r.loss_inputs for r in ranks):
        check.fail("a rank recorded no loss inputs")
        return check.finish()
    records = [rec for r in ranks for rec in r.loss_inputs]
    try:
        gap = gradients.gaps(records, gradients.Geometry.of(spec, world=len(ranks)))
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return check.finish()
    if gap.compared == 0 or not gap.scale > 0:
        check.fail(f"no token with a non-zero gradient to compare ({gap.compared} compared)")
        return check.finish()
    judge(check, gap, spec, f"{len(ranks)} ranks {gap.where}")
    return check.finish()


def pooled_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec, index: int, check_id: CheckId) -> CheckResult:
    """Log `index` of every rank against the oracle fed every rank's records of that interval."""
    check = Check(check_id)
    names = pooled_names(spec.beta, spec.loss_type)
    logs = [r.logs for r in ranks]
    if any(len(log) != spec.total_logs for log in logs):
        check.fail(f"ranks logged {[len(log) for log in logs]} intervals, expected {spec.total_logs} each")
        return check.finish()
    contract = [{n: log[index].get(n) for n in names} for log in logs]
    if any(c != contract[0] for c in contract[1:]):
        check.fail("ranks logged different values of the contract's metrics for the same interval")
    if not all(r.loss_inputs for r in ranks):
        check.fail("a rank recorded no loss inputs")
        return check.finish()
    per_rank = [intervals(r.loss_inputs, spec)[index] for r in ranks]
    if sorted({int(rec.rank) for records in per_rank for rec in records}) != list(range(len(ranks))):
        check.fail("the loss records do not name every rank once")
        return check.finish()
    pooled = expected_metrics([rec for records in per_rank for rec in records], spec)
    if ranks_differ(per_rank, pooled[ENTROPY].value, spec, check):
        logged = {n: logs[0][index][n] for n in names if n in logs[0][index]}
        check.absorb(compare(logged, {n: pooled[n] for n in names}, spec.dtype))
    return check.finish()


def ranks_differ(per_rank, pooled: float | None, spec: GRPOSpec, check: Check) -> bool:
    """The check has teeth only if a mean of per-rank entropies differs from the pooled one."""
    counts = [sum(int(rec.completion_mask.sum()) for rec in records) for records in per_rank]
    alone = [expected_metrics(records, spec)[ENTROPY].value for records in per_rank]
    if pooled is None or any(a is None for a in alone):
        check.fail(f"{ENTROPY} is not recomputable on every rank")
        return False
    if len(set(counts)) < 2 or abs(sum(alone) / len(alone) - pooled) < 1e-6:
        check.fail(f"completion tokens per rank {counts}: a mean of per-rank means would equal the pooled one")
        return False
    check.note(f"completion tokens per rank {counts}")
    return True
