"""PPO across data-parallel ranks: the runs each rank makes, and the checks on every rank's records pooled.

Each rank saves its `Ran` (logs, token ids, its PPO record: the spy's records, scores); the parent checks that the
logged metrics equal the oracle's pooled value over all ranks, not a mean of per-rank means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.compare import compare
from harness.instrument.observe import Ran
from harness.settings import applied
from harness.verdict import Check, CheckId, CheckResult

from .contract import LR0_IDENTITIES, POOLED_STATS, ROLLOUT
from .expect import expected_metrics
from .gradient_ranks import gradients_across_ranks
from .runs import LR0, UNEVEN
from .scores import joined, update_scores
from .spec import ScenarioSpec
from .tolerances import TOLERANCES
from .view import UpdateView, run_view

ENTROPY = "policy/entropy_avg"
"""The metric whose per-rank means are compared with the pooled one to show the run has teeth."""


def rank_specs(seed: int, settings: Mapping[str, Any] | None = None) -> dict[str, ScenarioSpec]:
    """The runs every rank makes: the uneven split over two updates (also freshness), and LR 0; `settings`
    (`verify-dist --set`) apply to both."""
    runs = {"uneven_split": UNEVEN, "lr0_ratio": LR0}
    return {name: applied(spec, settings or {}, ScenarioSpec()).with_(seed=seed) for name, spec in runs.items()}


def rank_reads(processes: int) -> dict[CheckId, tuple[str, ...]]:
    """Every check of verify-dist on `processes` ranks, with the runs of `rank_specs` it reads."""
    world = (("ranks", processes),)
    return {CheckId("uneven_split", world): ("uneven_split",), CheckId("freshness", world): ("uneven_split",),
            CheckId("lr0_ratio", world): ("lr0_ratio",), CheckId("logp_gradient", world): ("lr0_ratio",)}  # fmt: skip


def rank_checks(runs: dict[str, Sequence[Ran]], settings: Mapping[str, Any] | None = None) -> list[CheckResult]:
    """uneven_split (update 1), freshness (update 2) and lr0_ratio on the pooled records of every rank; only those
    whose runs are in `runs` (`rank_reads`); `settings`: those the runs were made with."""
    specs, results = rank_specs(0, settings), []
    if "uneven_split" in runs:
        uneven, spec = runs["uneven_split"], specs["uneven_split"]
        world = (("ranks", len(uneven)),)
        results += [pooled_across_ranks(uneven, spec, 0, CheckId("uneven_split", world)),
                    pooled_across_ranks(uneven, spec, 1, CheckId("freshness", world))]  # fmt: skip
    if "lr0_ratio" in runs:
        lr0, spec = runs["lr0_ratio"], specs["lr0_ratio"]
        world = (("ranks", len(lr0)),)
        results += [lr0_identities(lr0, spec, CheckId("lr0_ratio", world)),
                    gradients_across_ranks(lr0, spec, CheckId("logp_gradient", world))]  # fmt: skip
    return results


def pooled_across_ranks(ranks: Sequence[Ran], spec: ScenarioSpec, index: int, check_id: CheckId) -> CheckResult:
    """Logged metrics of update `index` against the oracle fed every rank's records of that update."""
    check = Check(check_id)
    names = POOLED_STATS + ROLLOUT
    logs = [r.logs for r in ranks]
    if any(len(log) != spec.total_updates for log in logs):
        check.fail(f"ranks logged {[len(log) for log in logs]} updates, expected {spec.total_updates} each")
        return check.finish()
    contract_logs = [{n: log[index].get(n) for n in names} for log in logs]
    if any(c != contract_logs[0] for c in contract_logs[1:]):
        check.fail("ranks logged different values of the contract's metrics for the same update")
    per_rank = [run_view(r).updates for r in ranks]
    if any(len(u) != spec.total_updates for u in per_rank):
        check.fail(f"spy saw {[len(u) for u in per_rank]} updates per rank")
        return check.finish()
    updates = [u[index] for u in per_rank]
    scores = joined([update_scores(r, u)[index] for r, u in zip(ranks, per_rank)])
    expected = expected_metrics(updates, spec.kl_coef, spec.kl_estimator, scores=scores)
    if ranks_differ(updates, expected[ENTROPY].value, spec, check):
        logged = {n: logs[0][index][n] for n in names}
        check.absorb(compare(logged, {n: expected[n] for n in names}, spec.dtype, TOLERANCES))
    return check.finish()


def ranks_differ(updates: Sequence[UpdateView], pooled: float | None, spec: ScenarioSpec, check: Check) -> bool:
    """The scenario has teeth only if a mean of per-rank means differs from the pooled mean."""
    counts = [int(u.rollout.response_mask.sum()) if u.rollout is not None else 0 for u in updates]
    if len(set(counts)) < 2:
        check.fail(f"every rank has {counts[0]} response tokens: a per-rank mean would equal the pooled one")
        return False
    alone = [expected_metrics([u], spec.kl_coef, spec.kl_estimator)[ENTROPY].value for u in updates]
    if pooled is None or any(a is None for a in alone):
        check.fail(f"{ENTROPY} is not recomputable on every rank")
        return False
    if abs(sum(alone) / len(alone) - pooled) < 1e-6:
        check.fail(f"per-rank padding too alike: mean of per-rank {ENTROPY} equals the pooled one")
        return False
    check.note(f"response tokens per rank {counts}")
    return True


def lr0_identities(ranks: Sequence[Ran], spec: ScenarioSpec, check_id: CheckId) -> CheckResult:
    """The LR-0 identities, as logged by the first rank."""
    check = Check(check_id)
    logs = ranks[0].logs
    if not logs or any(n not in logs[0] for n in LR0_IDENTITIES):
        check.fail("the trainer logged no update, or not every identity metric")
    else:
        check.absorb(compare(logs[0], LR0_IDENTITIES, spec.dtype, TOLERANCES, kind="identity"))
    return check.finish()
