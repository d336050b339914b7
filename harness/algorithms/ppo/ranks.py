"""PPO across data-parallel ranks: the runs each rank makes, and the checks on every rank's records pooled.

Each rank saves its `Ran` (logs, token ids, its PPO record: the spy's records, scores); the parent checks that the
logged metrics equal the oracle's pooled value over all ranks, not a mean of per-rank means.

The gradient across ranks (`gradients_across_ranks`): what the optimizer applies is the gradient of the global
token mean.

Each rank records, at every step, the `.grad` the optimizer sees (after the reduction across ranks) and the
sum of its own backward contributions. Two things are checked, at LR 0, on every step and every rank:

1. The reduction: every rank's `.grad` is one vector, `a` times the sum over ranks of their contributions
   (`a` = 1 / world when data parallelism averages, 1 when it sums). A micro-batch whose backward ran outside
   the synchronised one (no_sync on the wrong micro-batch) leaves a part of `.grad` no `a` explains.
2. The loss: `a` times each rank's recorded dL/dlogp_new equals the formula of gradients.py with N_R the
   response tokens of the minibatch over every rank. A loss without the world-size factor under averaging,
   or divided by this rank's token count instead of the global one, is off.

That the ranks drew with random streams of their own (`sampling[ranks=N]`, harness/checks/rank_sampling.py): each
rank's rollout responses of each update (the spy's rollout `logprob` records, in the order the rank sampled them).
The ranks roll out different prompts (their slices of one prompt order); a trainer that seeds every rank alike
draws each rank's k-th response with the same noise. The uneven split's two updates hold n of 92 to 180 aligned
positions at seeds 0-4: seeded apart, the reference's Z is -1.9 to -0.3; seeded alike (c87), its ranks agree at 35
to 49 % of those positions, Z 19 to 39.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from harness.checks.rank_sampling import sampling_across_ranks
from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import Ran
from harness.oracle.gradients import reductions
from harness.oracle.pooling import Expectation
from harness.settings import applied
from harness.unlogged import leave_out
from harness.verdict import Check, CheckId, CheckResult

from .contract import LR0_IDENTITIES, POOLED_STATS, ROLLOUT
from .oracle import gradients
from .oracle.expect import expected_metrics
from .oracle.scores import joined, update_scores
from .runs import LR0, UNEVEN
from .spec import ScenarioSpec
from .tolerances import TOLERANCES
from .view import UpdateView, run_view
from .wrong.poolings import AccumulationSlots

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
            CheckId("sampling", world): ("uneven_split",),
            CheckId("lr0_ratio", world): ("lr0_ratio",), CheckId("logp_gradient", world): ("lr0_ratio",)}  # fmt: skip


def rank_checks(runs: dict[str, Sequence[Ran]], settings: Mapping[str, Any] | None = None,
                unlogged: Sequence[str] = ()) -> list[CheckResult]:  # fmt: skip
    """uneven_split (update 1), freshness (update 2) and lr0_ratio on the pooled records of every rank, and sampling
    on each rank's rollout responses of the uneven split; only those whose runs are in `runs` (`rank_reads`);
    `settings`: those the runs were made with; `unlogged`: the metrics the target declares its trainer does not log,
    left out as on one process."""
    specs, results = rank_specs(0, settings), []
    if "uneven_split" in runs:
        uneven, spec = runs["uneven_split"], specs["uneven_split"]
        world = (("ranks", len(uneven)),)
        results += [pooled_across_ranks(uneven, spec, 0, CheckId("uneven_split", world), unlogged),
                    pooled_across_ranks(uneven, spec, 1, CheckId("freshness", world), unlogged),
                    rank_sampling(uneven, CheckId("sampling", world))]  # fmt: skip
    if "lr0_ratio" in runs:
        lr0, spec = runs["lr0_ratio"], specs["lr0_ratio"]
        world = (("ranks", len(lr0)),)
        results += [lr0_identities(lr0, spec, CheckId("lr0_ratio", world), unlogged),
                    gradients_across_ranks(lr0, spec, CheckId("logp_gradient", world))]  # fmt: skip
    return results


def pooled_across_ranks(ranks: Sequence[Ran], spec: ScenarioSpec, index: int, check_id: CheckId,
                        unlogged: Sequence[str] = ()) -> CheckResult:  # fmt: skip
    """Logged metrics of update `index` against the oracle fed every rank's records of that update, less those the
    target declares its trainer does not log (`unlogged`)."""
    check = Check(check_id)
    logs = [r.logs for r in ranks]
    names = leave_out(check, [log for each in logs for log in each], POOLED_STATS + ROLLOUT, unlogged, "every rank")
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


SOURCE = "the spy's rollout `logprob` records"
"""Where a PPO rank's responses are read from, as a failure names it."""


def responses_of(ran: Ran) -> dict[int, torch.Tensor]:
    """Update -> (N, T) this rank's rollout responses, in the order it sampled them (the rollout records' rows)."""
    return {u.index: u.rollout.responses for u in run_view(ran).updates if u.rollout is not None}


def rank_sampling(ranks: Sequence[Ran], check_id: CheckId) -> CheckResult:
    """Fail when some pair of ranks drew its aligned responses with the same noise (harness/checks/rank_sampling)."""
    drawn = [responses_of(r) for r in ranks]
    return sampling_across_ranks(drawn, ranks[0].stop_token_id, ranks[0].pad_token_id, check_id, SOURCE)


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


def lr0_identities(ranks: Sequence[Ran], spec: ScenarioSpec, check_id: CheckId,
                   unlogged: Sequence[str] = ()) -> CheckResult:  # fmt: skip
    """The LR-0 identities, as logged by the first rank, less those the target declares it does not log."""
    check = Check(check_id)
    logs = ranks[0].logs
    names = leave_out(check, logs, tuple(LR0_IDENTITIES), unlogged, "rank 0")
    if not logs or any(n not in logs[0] for n in names):
        check.fail("the trainer logged no update, or not every identity metric")
    elif names:
        check.absorb(compare(logs[0], {n: LR0_IDENTITIES[n] for n in names}, spec.dtype, TOLERANCES, kind="identity"))
    return check.finish()


DTYPE = "float32"
"""The dtype verify-dist's ranks train in (its runs are float32)."""


def gradients_across_ranks(ranks: Sequence[Ran], spec: ScenarioSpec, check_id: CheckId) -> CheckResult:
    """Steps reduced alike on every rank, and each rank's dL/dlogp against the formula with global counts."""
    check = Check(check_id)
    factors = reductions(ranks, spec.steps_per_update * spec.total_updates, check, TOLERANCES)
    if factors is None:
        return check.finish()
    per_rank = [run_view(r).updates for r in ranks]
    if any(len(u) != spec.total_updates for u in per_rank):
        check.fail(f"spy saw {[len(u) for u in per_rank]} updates per rank, expected {spec.total_updates}")
        return check.finish()
    per_minibatch = AccumulationSlots.of(spec).per_pass
    for index in range(spec.total_updates):
        updates = [u[index] for u in per_rank]
        logged, expected = logp_against_formula(updates, per_minibatch, spec, factors)
        check.absorb(compare(logged, expected, DTYPE, TOLERANCES, kind="formula", where=f"update {index + 1}"))
    return check.finish()


def logp_against_formula(
    updates: Sequence[UpdateView], per_minibatch: int, spec: ScenarioSpec, factors: Sequence[float]
) -> tuple[dict[str, float], dict[str, Expectation]]:
    """The largest gap over every rank of a * recorded dL/dlogp against the formula with global N_R."""
    metric = gradients.METRIC
    try:
        local = [gradients.minibatch_counts(u, per_minibatch) for u in updates]
        if len({len(c) for c in local}) != 1 or len(local[0]) != len(factors) // spec.total_updates:
            raise NotRecomputable(f"minibatches per rank {[len(c) for c in local]}, steps {len(factors)}")
        counts = [sum(c) for c in zip(*local)]
        if max(factors) - min(factors) > 1e-3 * max(abs(f) for f in factors):
            raise NotRecomputable(f"the reduction factor changes from step to step: {factors}")
        found = [gradients.gaps(u, per_minibatch, spec.cliprange, DTYPE, counts, factors[0]) for u in updates]
    except NotRecomputable as why:
        return {metric: 0.0}, {metric: Expectation.unknown(metric, str(why))}
    largest = max(f[0] for f in found)
    scale = sum(f[1] for f in found) / len(found)
    return {metric: largest}, {metric: Expectation(metric, 0.0, scale=scale)}
