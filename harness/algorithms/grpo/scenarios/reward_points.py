"""The points of the GRPO reward checks (scenarios/rewards.py): which run each case reads, and whether a run that
moves off the default can tell the two apart.

A point moves the reward run off the default in one setting: TRL's GDPO aggregation ('normalize_then_sum'), groups
of 8, or the two reward functions handed to the trainer in the reversed order (`reward_order`, each function with
its own weight). A run whose numbers would come out the same at the default proves nothing there, so the check
fails it as the run's (`told_from_the_default`, `orders_told_apart`) rather than pass a trainer that ignores the
setting.
"""

from __future__ import annotations

import dataclasses

from harness.instrument.observe import Observation, ObservationCache
from harness.scenario import Case
from harness.tolerances import tolerance

from ..instruments import recorded
from ..oracle import rewards
from ..runs import REWARDS, SMALL_GROUPS, UNEVEN, spec_for
from ..spec import GRPOSpec
from ..tolerances import TOLERANCES

AGGREGATED = (("multi_objective_aggregation", "normalize_then_sum"),)
"""The point of the reward checks under TRL's GDPO aggregation (their runs, scale_rewards at the run's)."""
GROUPS = (("num_generations", 8),)
"""The point of the reward checks with groups of 8, not the default 4: two prompts per generation of 16."""
REVERSED = (("reward_order", "reversed"),)
"""The point of the reward checks whose target hands its trainer the stop reward first and the count second, each
with its own weight: the order of their names ('count_w7' before 'stopped' for the reference) is then not the
order of the weights, so a trainer that pairs them by name shows."""
REWARD_RUNS = {"small_groups": SMALL_GROUPS, "one_function": UNEVEN}
"""The `run` points of reward_stats: one group per interval (statistics over too few scores), and the uneven run's
one reward function with no `reward_weights` (the default weight 1)."""
MOVED = ("scale_rewards", "multi_objective_aggregation", "reward_order")
"""The settings a case's parameters move on the reward run."""


def reward_run(cache: ObservationCache, run: GRPOSpec, case: Case) -> Observation:
    base = REWARD_RUNS.get(case.param("run", None), REWARDS)
    moved = {key: case.param(key, getattr(run, key)) for key in MOVED}
    return cache.get(spec_for(base, run).with_(num_generations=case.param("num_generations", base.num_generations),
                                               **moved), spy=False)  # fmt: skip


def order_honoured(cache: ObservationCache, obs: Observation) -> str:
    """Under reward_order 'reversed': '' when the target handed its trainer the reward functions the other way round
    than in the same run as listed (the reward calls' names by `index`), else why it did not; a target that ignores
    reward_order would otherwise be judged against weights it never handed over."""
    if obs.spec.reward_order == GRPOSpec().reward_order:
        return ""
    here = handed_names(obs)
    there = handed_names(cache.get(obs.spec.with_(reward_order=GRPOSpec().reward_order), spy=False))
    if not here or not there or (here != there and here == there[::-1]):
        return ""  # a run with no reward calls fails as not recomputable
    return (f"the target handed its trainer the reward functions as {list(here)} at reward_order="
            f"{obs.spec.reward_order!r} and as {list(there)} as listed: it must hand them over (and their weights, "
            f"GRPOSpec.handed_weights) in the reversed order (docs/using-the-gate.md, section 7)")  # fmt: skip


def handed_names(obs: Observation) -> tuple[str, ...]:
    """The reward functions' names in the order the run's target handed them over (its reward calls' `index`)."""
    calls = recorded(obs.ran).reward_calls or ()
    return tuple(dict(sorted({int(c.index): str(c.function) for c in calls}.items())).values())


def told_from_the_default(made, rows, spec: GRPOSpec, epsilon: float) -> str:
    """Where the case moves the run off the default (groups of another size, 'normalize_then_sum', or the reward
    functions in the reversed order): '' when some trained row's advantage differs from its advantage at the
    default (sum_then_normalize, groups of GRPOSpec's num_generations; the weights paired with the functions the
    other way round) by more than the advantage's tolerance, else why the run cannot tell them apart."""
    default = GRPOSpec()
    moved = [f"{name}={getattr(spec, name)!r}" for name in ("num_generations", "multi_objective_aggregation")
             if getattr(spec, name) != getattr(default, name)]  # fmt: skip
    if spec.reward_order != default.reward_order:
        return orders_told_apart(made, rows, spec, epsilon)
    if not moved:
        return ""
    weights = rewards.handed_weights(spec)
    other = {g: rewards.group_advantages(rewards.weighted_rewards(m.scores, weights), default.num_generations,
                                         spec.scale_rewards, epsilon)[0] for g, m in made.items()}  # fmt: skip
    return "" if differs(made, rows, other, spec) else (
        f"no trained row's advantage at {', '.join(moved)} differs from its advantage at the default: the run does "
        f"not tell them apart")  # fmt: skip


def orders_told_apart(made, rows, spec: GRPOSpec, epsilon: float) -> str:
    """'' when some trained row's advantage with the handed weights paired the other way round (each function
    given the other's weight, as a trainer that sorts its functions by name does here) differs from the oracle's
    by more than the advantage's tolerance, else why the run cannot tell the orders apart."""
    weights = rewards.handed_weights(spec)
    if len(weights) != 2 or weights[0] == weights[1]:
        return (f"reward_order={spec.reward_order!r} with reward_weights={spec.reward_weights}: two different "
                f"weights are needed to tell the orders apart")  # fmt: skip
    other = {g: rewards.scored_advantages(m.scores, weights[::-1], spec, epsilon)[0] for g, m in made.items()}
    return "" if differs(made, rows, other, spec) else (
        f"no trained row's advantage with the weights {weights} paired the other way round differs from its "
        f"advantage as handed over: the run does not tell the orders apart")  # fmt: skip


def stats_told_apart(made, rows, spec: GRPOSpec) -> str:
    """Under the reversed order, for the reward statistics: '' when some interval's `reward` or `reward_std` with
    the weights paired the other way round differs from the oracle's, and some interval's two functions' means
    differ (so that one logged under the other's name shows), each beyond its tolerance; else why not."""
    if spec.reward_order == GRPOSpec().reward_order:
        return ""
    weights = rewards.handed_weights(spec)
    if len(weights) != 2 or weights[0] == weights[1]:
        return orders_told_apart(made, rows, spec, rewards.STD_EPS)
    swapped = {g: dataclasses.replace(m, rewards=rewards.weighted_rewards(m.scores, weights[::-1]))
               for g, m in made.items()}  # fmt: skip
    summed = named = False
    for trained in rows:
        want, other = rewards.reward_stats(made, trained), rewards.reward_stats(swapped, trained)
        summed = summed or any(_apart(want[n].value, other[n].value, n, spec, want[n].scale)
                               for n in ("reward", "reward_std") if want[n].count)  # fmt: skip
        means = [e for n, e in want.items() if n.startswith("rewards/") and n.endswith("/mean") and e.count]
        named = named or (len(means) == 2 and _apart(means[0].value, means[1].value, means[0].metric, spec))
    if summed and named:
        return ""
    return ("the run does not tell the orders apart: "
            + ("" if summed else "no interval's reward or reward_std moves with the weights paired the other way "
               "round") + ("" if summed or named else "; ")
            + ("" if named else "no interval's two functions' means differ"))  # fmt: skip


def differs(made, rows, other, spec: GRPOSpec) -> bool:
    """Whether some trained row's advantage in `other` (generation -> advantages) is off the oracle's by more than
    the advantage's tolerance."""
    tol = tolerance("advantage", spec.dtype, TOLERANCES)
    return any(abs(float(other[g][row]) - float(made[g].advantages[row])) > tol.allowed(float(made[g].advantages[row]))
               for trained in rows for g, row, *_ in trained)  # fmt: skip


def _apart(value: float, other: float, name: str, spec: GRPOSpec, scale: float | None = None) -> bool:
    return abs(value - other) > tolerance(name, spec.dtype, TOLERANCES).allowed(value, scale)
