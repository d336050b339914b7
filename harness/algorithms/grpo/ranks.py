"""GRPO across data-parallel ranks: the run each rank makes, and the checks on every rank's records pooled.

Each rank saves its `Ran` (logs, and its GRPO record: loss records, reward calls); the parent checks that every
interval's logged metrics equal the oracle's value over the union of all ranks' records (TRL PR 6380
fixed a mean of per-rank means), after checking that a mean of per-rank values would differ; that every
optimizer step is reduced alike on every rank (each rank's `.grad` one vector, a multiple of the sum of every
rank's own backward contributions: `no_sync` on the wrong micro-batch leaves a part of it on one rank); and
that each rank's gradient at its log-probs is the loss type's formula over every rank's tokens, times the
number of ranks (data parallelism averages the ranks' gradients). What each rank generates, scores and
normalises: on a run with two reward functions and `scale_rewards="batch"`, every loss row's advantage on
every rank equals the oracle's over every rank's recorded scores (the batch's std is the whole generation
batch's, every rank's completions, which differs from each rank's own: the check fails when it would not),
each rank's masks are the contract's, and each rank's reward functions were given its own completions. That the
ranks drew with random streams of their own (`sampling[ranks=N]`): rank_sampling.py. That every rank's optimizer
follows the declared learning-rate schedule and decay (`lr_schedule[ranks=N]`, harness/checks/lr_schedule.py): a
schedule stepped once per process at each step runs world times too fast there alone. That each rank's entropy
bonus is the window's mean over every rank's tokens (`entropy_gradient[ranks=N]`): a count of a rank's own tokens,
or the ranks' mean count, shows only across ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.checks.lr_schedule import judge_schedule
from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import Ran
from harness.oracle.gradients import reductions
from harness.settings import applied
from harness.tolerances import tolerance
from harness.verdict import Check, CheckId, CheckResult

from .contract import pooled_names
from .definitions import ADVANTAGE_EPSILON
from .instruments import recorded
from .oracle import gradients, rewards
from .oracle.expect import expected_metrics, intervals
from .rank_sampling import sampling_across_ranks
from .runs import LR_SCHEDULE, TOP_ENTROPY_QUANTILE, UNEVEN
from .scenarios import masks, reward_inputs
from .scenarios.entropy import bonus_gradient, bonus_spec
from .scenarios.gradients import judge
from .scenarios.policy_masks import shows_mask
from .scenarios.preconditions import logged_names
from .scenarios.schedule import declared_schedule, logged_rates
from .spec import GRPOSpec
from .tolerances import TOLERANCES

ENTROPY = "entropy"
"""The metric whose per-rank values are compared with the pooled one to show the run has teeth."""


REWARDS = UNEVEN.with_(name="advantages", reward_weights=(1.0, -0.5), scale_rewards="batch")
"""Two reward functions, advantages scaled by the generation batch's std: a rank's own std is not the batch's."""


@dataclass(frozen=True)
class Declared:
    """What the target declares that verify-dist's checks read, as the checks of one process do: the optional
    metrics it logs, those it does not log, its definitions ((name, value) pairs) and its advantage epsilon."""

    optional: tuple[str, ...] = ()
    unlogged: tuple[str, ...] = ()
    definitions: tuple[tuple[str, Any], ...] = ()
    advantage_epsilon: float = rewards.STD_EPS

    @classmethod
    def of(cls, target: Any) -> Declared:
        """The declarations of a resolved target (harness/targets `Target`); the defaults for None."""
        if target is None:
            return cls()
        epsilon = target.definition(ADVANTAGE_EPSILON, rewards.STD_EPS)
        return cls(tuple(target.optional_metrics), tuple(target.unlogged_metrics), tuple(target.definitions),
                   float(epsilon))  # fmt: skip


GRADIENT_LOSS_TYPES = ("grpo", "bnpo")
"""Loss types whose window is divided by a count over every rank other than dapo's tokens: grpo's completions (as
sapo's, luspo's and, times the length, dr_grpo's) and bnpo's micro-batches; each has a short run of its own, so
that a count taken over this rank alone (or divided by the ranks) shows in the gradient."""


def loss_type_run(loss_type: str) -> GRPOSpec:
    """The two-window run that holds `loss_type`'s gradient across ranks."""
    return UNEVEN.with_(name=f"logp_gradient_{loss_type}", loss_type=loss_type, max_steps=2, logging_steps=2)


BONUS = bonus_spec(GRPOSpec())
"""uneven_lengths' run with the entropy bonus (scenarios/entropy.py): each window's bonus tokens on every rank
together; a count of a rank's own tokens (or their mean over the ranks), a part of every rank's, shows whatever the
ranks' counts (tests/harness/algorithms/grpo/oracle/test_grpo_entropy_bonus.py)."""

TOP_ENTROPY = loss_type_run("grpo").with_(name="logp_gradient_top_entropy", top_entropy_quantile=TOP_ENTROPY_QUANTILE)
"""The entropy mask across ranks: each micro-batch's threshold is the quantile of every rank's entropies together,
the ranks' counts of tokens unequal (uneven lengths), so a rank's own quantile, or padding that enters it, moves the
threshold."""


def rank_specs(seed: int, settings: Mapping[str, Any] | None = None) -> dict[str, GRPOSpec]:
    """The runs every rank makes: two generations, each logged once (also the freshness of the second log); the
    same with two reward functions under batch scaling (the advantages, masks and reward inputs); two windows under
    each of GRADIENT_LOSS_TYPES (the gradient); TOP_ENTROPY; BONUS; and LR_SCHEDULE. `settings` (`verify-dist
    --set`) apply to every run but where the run sets the key itself (the loss type of a gradient run, the batch
    scaling of the reward run)."""
    runs = {"uneven_lengths": UNEVEN, "advantages": REWARDS, "logp_gradient_top_entropy": TOP_ENTROPY,
            "lr_schedule": LR_SCHEDULE, "entropy_gradient": BONUS,
            **{f"logp_gradient_{t}": loss_type_run(t) for t in GRADIENT_LOSS_TYPES}}  # fmt: skip
    return {name: applied(spec, settings or {}, GRPOSpec()).with_(seed=seed) for name, spec in runs.items()}


def rank_reads(processes: int) -> dict[CheckId, tuple[str, ...]]:
    """Every check of verify-dist on `processes` ranks, with the runs of `rank_specs` it reads."""
    world = (("ranks", processes),)
    return {
        CheckId("uneven_lengths", world): ("uneven_lengths",),
        CheckId("freshness", world): ("uneven_lengths",),
        CheckId("sampling", world): ("uneven_lengths",),
        CheckId("logp_gradient", world): ("uneven_lengths",),
        **{CheckId("logp_gradient", (*world, ("loss_type", t))): (f"logp_gradient_{t}",) for t in GRADIENT_LOSS_TYPES},
        CheckId("logp_gradient", (*world, ("run", "top_entropy"))): ("logp_gradient_top_entropy",),
        **{CheckId(name, world): ("advantages",) for name in ("advantages", "completion_mask", "reward_inputs")},
        CheckId("lr_schedule", world): ("lr_schedule",),
        CheckId("entropy_gradient", world): ("entropy_gradient",),
    }


def rank_checks(runs: dict[str, Sequence[Ran]], declared: Declared = Declared(),
                settings: Mapping[str, Any] | None = None) -> list[CheckResult]:  # fmt: skip
    """uneven_lengths (log 1) and freshness (log 2) on the pooled records of every rank, and sampling on each rank's
    completions of that run; logp_gradient on every
    rank's recorded gradients, against the formula with every rank's counts and the world factor; the checks of the
    reward run; each as the target `declared` it (its metrics, its definitions). Only the checks whose runs are all
    in `runs` (`rank_reads`); `settings`: those the runs were made with."""
    specs = rank_specs(0, settings)
    results = []
    if "uneven_lengths" in runs:
        ranks, spec = runs["uneven_lengths"], specs["uneven_lengths"]
        world = (("ranks", len(ranks)),)
        results += [pooled_across_ranks(ranks, spec, index, CheckId(name, world), declared)
                    for index, name in enumerate(("uneven_lengths", "freshness"))]  # fmt: skip
        results.append(sampling_across_ranks(ranks, CheckId("sampling", world)))
        results.append(logp_gradient_across_ranks(ranks, spec, CheckId("logp_gradient", world), declared))
    for t in GRADIENT_LOSS_TYPES:
        if f"logp_gradient_{t}" in runs:
            ranks = runs[f"logp_gradient_{t}"]
            check_id = CheckId("logp_gradient", (("ranks", len(ranks)), ("loss_type", t)))
            results.append(logp_gradient_across_ranks(ranks, specs[f"logp_gradient_{t}"], check_id, declared))
    if "logp_gradient_top_entropy" in runs:
        ranks = runs["logp_gradient_top_entropy"]
        check_id = CheckId("logp_gradient", (("ranks", len(ranks)), ("run", "top_entropy")))
        results.append(logp_gradient_across_ranks(ranks, specs["logp_gradient_top_entropy"], check_id, declared))
    if "advantages" in runs:
        results += rollout_across_ranks(runs["advantages"], specs["advantages"], declared)
    if "lr_schedule" in runs:
        results.append(schedule_across_ranks(runs["lr_schedule"], specs["lr_schedule"]))
    if "entropy_gradient" in runs:
        results.append(bonus_across_ranks(runs["entropy_gradient"], specs["entropy_gradient"], declared))
    return results


def bonus_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec, declared: Declared = Declared()) -> CheckResult:
    """Every optimizer step reduced alike on every rank, and each rank's dL/dH == -entropy_coef * world / (its
    window's bonus tokens on every rank) (entropy_gradient's formula over every rank's records)."""
    check = Check(CheckId("entropy_gradient", (("ranks", len(ranks)),)))
    records = reduced_records(ranks, spec, check)
    if records is not None:
        bonus_gradient(check, records, spec, len(ranks), declared.definitions, f"{len(ranks)} ranks")
    return check.finish()


def reduced_records(ranks: Sequence[Ran], spec: GRPOSpec, check: Check) -> list | None:
    """Every rank's loss records, once every rank recorded some and every optimizer step was reduced alike on every
    rank (harness/oracle/gradients.py `reductions`); None, the check failed saying why, otherwise."""
    if not all(recorded(r).loss_inputs for r in ranks):
        check.fail("a rank recorded no loss inputs")
        return None
    if reductions(ranks, spec.max_steps, check, TOLERANCES) is None:
        return None
    return [rec for r in ranks for rec in recorded(r).loss_inputs]


def schedule_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec) -> CheckResult:
    """Every rank's optimizer steps, and its logged rates where it logs, against the run's declared schedule."""
    check = Check(CheckId("lr_schedule", (("ranks", len(ranks)),)))
    for rank, ran in enumerate(ranks):
        judge_schedule(ran.grads, check, declared_schedule(spec), spec.weight_decay, logged_rates(ran, spec),
                       where=f"rank {rank}", world=len(ranks), settings=spec.optimizer_settings)  # fmt: skip
    return check.finish()


def logp_gradient_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec, check_id: CheckId,
                               declared: Declared = Declared()) -> CheckResult:  # fmt: skip
    """Every optimizer step reduced alike on every rank (each rank's .grad one vector, a times the sum of every
    rank's own backward contributions: harness/oracle/gradients.py `reduction`), and each rank's dL/dlogp ==
    world * the window weight over every rank's tokens * d l_t / d logp_t."""
    check = Check(check_id)
    records = reduced_records(ranks, spec, check)
    if records is None:
        return check.finish()
    try:
        gap = gradients.gaps(records, gradients.WindowWeights.of(spec, world=len(ranks),
                                                                 definitions=declared.definitions))  # fmt: skip
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return check.finish()
    if gap.compared == 0 or not gap.scale > 0:
        check.fail(f"no token with a non-zero gradient to compare ({gap.compared} compared)")
        return check.finish()
    if spec.top_entropy_quantile < 1 and not shows_mask(check, gap, spec):
        return check.finish()
    judge(check, gap, spec, f"{len(ranks)} ranks {gap.where}")
    return check.finish()


def pooled_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec, index: int, check_id: CheckId,
                        declared: Declared = Declared()) -> CheckResult:  # fmt: skip
    """Log `index` of every rank against the oracle fed every rank's records of that interval; the declared metrics
    as on one process (preconditions.logged_names: an optional one left out, said in a note, where no log has it
    and the target does not declare it, a failure where it does; a declared unlogged one left out)."""
    check = Check(check_id)
    logs = [r.logs for r in ranks]
    names = logged_names([log for each in logs for log in each], pooled_names(spec.beta, spec.loss_type), check,
                         declared.optional, "every rank", declared.unlogged)  # fmt: skip
    if any(len(log) != spec.total_logs for log in logs):
        check.fail(f"ranks logged {[len(log) for log in logs]} intervals, expected {spec.total_logs} each")
        return check.finish()
    contract = [{n: log[index].get(n) for n in names} for log in logs]
    if any(c != contract[0] for c in contract[1:]):
        check.fail("ranks logged different values of the contract's metrics for the same interval")
    if not all(recorded(r).loss_inputs for r in ranks):
        check.fail("a rank recorded no loss inputs")
        return check.finish()
    per_rank = [intervals(recorded(r).loss_inputs, spec)[index] for r in ranks]
    if sorted({int(rec.rank) for records in per_rank for rec in records}) != list(range(len(ranks))):
        check.fail("the loss records do not name every rank once")
        return check.finish()
    pooled = expected_metrics([rec for records in per_rank for rec in records], spec, declared.definitions)
    if ranks_differ(per_rank, pooled[ENTROPY].value, spec, check):
        logged = {n: logs[0][index][n] for n in names if n in logs[0][index]}
        check.absorb(compare(logged, {n: pooled[n] for n in names}, spec.dtype, TOLERANCES))
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


def rollout_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec, declared: Declared = Declared()) -> list[CheckResult]:
    """advantages, completion_mask and reward_inputs on every rank's records (module docstring)."""
    world = (("ranks", len(ranks)),)
    return [advantages_across_ranks(ranks, spec, CheckId("advantages", world), declared.advantage_epsilon),
            masks_across_ranks(ranks, CheckId("completion_mask", world)),
            reward_inputs_across_ranks(ranks, CheckId("reward_inputs", world))]  # fmt: skip


def advantages_across_ranks(ranks: Sequence[Ran], spec: GRPOSpec, check_id: CheckId,
                            epsilon: float = rewards.STD_EPS) -> CheckResult:  # fmt: skip
    """Every rank's loss rows' advantages == the oracle's over every rank's scores (`epsilon`: the advantage's, as
    the target declares it), which a rank's own differ from."""
    check = Check(check_id)
    kept = [recorded(r) for r in ranks]
    if not all(k.loss_inputs and k.reward_calls for k in kept):
        check.fail("a rank recorded no loss inputs or no reward calls")
        return check.finish()
    calls = [c for k in kept for c in k.reward_calls]
    records = [rec for k in kept for rec in k.loss_inputs]
    made = rewards.generations(calls, spec, epsilon)
    alone = [rewards.generations(k.reward_calls, spec, epsilon) for k in kept]
    rows = rewards.trained_rows(records, made) if not isinstance(made, str) else made
    problem = next((x for x in (made, rows, *alone) if isinstance(x, str)), None)
    if problem is not None:
        check.fail(f"not recomputable: {problem}")
        return check.finish()
    tol, off, moved, worst = tolerance("advantage", spec.dtype, TOLERANCES), 0, 0, (0.0, "")
    for generation, row, k, j in rows:
        record = records[k]
        logged, want = float(record.advantages[j]), float(made[generation].advantages[row])
        rank, index = int(record.rank), int(torch.as_tensor(record.completions).reshape(-1)[j])
        own = alone[rank][generation]
        moved += abs(float(own.advantages[own.row(rank, index)]) - want) > tol.allowed(want)
        gap = abs(logged - want)
        if not gap <= tol.allowed(want):
            off += 1
            if not gap <= worst[0]:
                worst = (gap, f"rank {rank}, generation {generation}, completion {index}: {logged:.6g} where the "
                              f"oracle over every rank's scores gives {want:.6g}")  # fmt: skip
    if not moved:
        check.fail(f"no rank's own batch std would give another advantage ({len(rows)} rows): nothing shows that "
                   f"the std is the whole batch's")  # fmt: skip
    elif off:
        check.fail(f"{off} of {len(rows)} advantages are not the oracle's over every rank's scores; the worst: "
                   f"{worst[1]}")  # fmt: skip
    else:
        check.note(f"{len(rows)} advantages over {len(ranks)} ranks; {moved} would differ under a rank's own std")
    return check.finish()


def masks_across_ranks(ranks: Sequence[Ran], check_id: CheckId) -> CheckResult:
    """Every rank's loss rows' masks are the contract's (masks.py)."""
    check = Check(check_id)
    wrong, rows = [], 0
    for ran in ranks:
        found = masks.row_problems(recorded(ran).loss_inputs or (), ran.stop_token_id, ran.pad_token_id)
        if isinstance(found, str):
            check.fail(found)
            return check.finish()
        wrong, rows = wrong + found[0], rows + found[1]
    if not rows:
        check.fail("no rank recorded a loss row")
    masks.fail_rows(check, wrong, rows)
    return check.finish()


def reward_inputs_across_ranks(ranks: Sequence[Ran], check_id: CheckId) -> CheckResult:
    """Each rank's reward functions were given that rank's completions, row by row (reward_inputs.py)."""
    check = Check(check_id)
    wrong, compared, calls = [], 0, 0
    for ran in ranks:
        found = reward_inputs.input_problems(ran)
        if isinstance(found, str):
            check.fail(found)
            return check.finish()
        wrong, compared, calls = wrong + found[0], compared + found[1], calls + found[2]
    reward_inputs.judge_inputs(check, wrong, compared, calls)
    return check.finish()
