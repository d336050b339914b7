"""Known wrong formulas of GRPO's training signal, recomputed from the recorded scores (bug classes 48-51).

The `advantages` check (scenarios/rewards.py) holds every advantage the loss saw to the oracle's
(rewards.py). When some are off, each formula here is recomputed from the same reward calls,
weights and groups, and named only when it reproduces *every* trained row's logged advantage
within the advantage's tolerance (`tolerances.py`); among those that do, the fewest departures
win, and two different formulas that both do name nothing (harness/diagnose.py's rule). The
`reward_stats` check's failing statistics get the same formulas through harness/diagnose.py.

    population std            the std with divisor n, not Bessel's n - 1       (class 48)
    batch std for the group   scale_rewards='group' divided by the batch's std (class 49)
    the group's std           scale_rewards='batch' divided by each group's std
    over the batch            mean (and std) of the whole generation batch, not of each group
    centred on the batch      the batch's mean, the group's std
    no std scaling            the rewards minus the group mean, divided by nothing
    a std scaling             scale_rewards='none' divided by the group's or the batch's std
    unscorable rewarded 0     a reward no function could give counted as 0    (class 50)
    weights not applied       the scores summed with weight 1                  (class 51)
    a fixed group size        the advantages in groups of 4 (the gate's default num_generations), not of
                              num_generations rows                             (class 81)
    the other aggregation     under multi_objective_aggregation 'normalize_then_sum', the weighted sum
                              normalised as scale_rewards says, or the other way round  (class 80)
    weights before normalising  under 'normalize_then_sum', each function's scores weighted before it is
                              normalised in its group: only each weight's sign is left  (class 83)
    weights in another order  two functions' weights paired with them the other way round than the target handed
                              them over (the functions sorted by name, say)              (class 86)
    a common factor           c times the oracle's advantage in every row (c fitted; the fallback)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from harness.diagnose import Candidate, diagnosed
from harness.tolerances import tolerance
from harness.verdict import Diagnosis, MetricVerdict

from ..definitions import ADVANTAGE_EPSILON, VOCABULARY
from ..oracle import rewards as oracle
from ..oracle.rewards import STD_EPS, Generation, decoupled_advantages, nan_mean, nan_std, weighted_rewards
from ..spec import GRPOSpec
from ..tolerances import TOLERANCES

SOURCE = "reward calls"
DEFAULT_GROUP = GRPOSpec().num_generations
"""The gate's default num_generations (4; TRL's is 8): the group size of every other run, so the one a trainer that
holds a constant group size passes them with."""


def nan_pstd(values: torch.Tensor) -> float:
    """Population std (divisor n) of the non-NaN values; NaN when fewer than two are left (as the Bessel one)."""
    kept = values[~values.isnan()]
    if kept.numel() < 2:
        return math.nan
    return math.sqrt(float(((kept - kept.mean()) ** 2).mean()))


def advantages_of(
    rewards: torch.Tensor, size: int, center: str, scale: str, std=nan_std, epsilon: float = STD_EPS
) -> torch.Tensor:
    """(N,) rewards minus the mean of their group ('group') or of the batch ('batch'), divided by (std + epsilon,
    1e-4 unless the target declares another) of the group, of the batch, or by nothing ('none'); NaN advantages
    as 0."""
    groups = rewards.view(-1, size)
    if center == "group":
        means = torch.tensor([nan_mean(g) for g in groups], dtype=torch.float64).repeat_interleave(size)
    else:
        means = torch.full_like(rewards, nan_mean(rewards))
    advantages = rewards - means
    if scale == "group":
        stds = torch.tensor([std(g) for g in groups], dtype=torch.float64).repeat_interleave(size)
        advantages = advantages / (stds + epsilon)
    elif scale == "batch":
        advantages = advantages / (std(rewards) + epsilon)
    return torch.nan_to_num(advantages, nan=0.0)


@dataclass(frozen=True)
class Formula:
    """One known wrong advantage formula: what it is, and the advantages it gives from one generation's scores."""

    classes: tuple[int, ...]
    formula: str
    advantages: Callable[[Generation], torch.Tensor]


def aggregation_formulas(weights: Sequence[float], size: int, scale_rewards: str, aggregation: str,
                         epsilon: float = STD_EPS) -> list[Formula]:  # fmt: skip
    """The other multi_objective_aggregation than the run's (class 80), and under 'normalize_then_sum' the weights
    before normalising (83) and two weights swapped (86): with two or more reward functions only."""
    if len(weights) < 2:
        return []
    if aggregation == "normalize_then_sum":
        ones = [1.0] * len(weights)
        return other_order(weights, lambda m, w: decoupled_advantages(m.scores, w, size, epsilon)[0]) + [
                Formula((80,), f"the weighted sum of the scores normalised (scale_rewards={scale_rewards!r}), not "
                        f"each function's scores normalised first (multi_objective_aggregation='sum_then_normalize')",
                        lambda m: advantages_of(weighted_rewards(m.scores, weights), size, "group", scale_rewards,
                                                epsilon=epsilon)),
                Formula((83,), "the weights applied to the raw scores, before each function is normalised in its "
                        "group (which cancels their size: only their signs are left)",
                        lambda m: decoupled_advantages(m.scores * m.scores.new_tensor(weights), ones, size,
                                                       epsilon)[0])]  # fmt: skip
    return [Formula((80,), "each function's scores normalised in its group, then their weighted sum over the batch "
                    "(multi_objective_aggregation='normalize_then_sum')",
                    lambda m: decoupled_advantages(m.scores, weights, size, epsilon)[0])]  # fmt: skip


def formulas(weights: Sequence[float], size: int, scale_rewards: str, epsilon: float = STD_EPS,
             aggregation: str = "sum_then_normalize") -> list[Formula]:  # fmt: skip
    """The known wrong formulas under `scale_rewards` and `aggregation` (those that differ from them), with the
    advantage epsilon the target declares; and the epsilon of each other profile of definitions.py, where the target
    declares another."""
    if aggregation == "normalize_then_sum":
        return aggregation_formulas(weights, size, scale_rewards, aggregation, epsilon)
    rewards = lambda m: weighted_rewards(m.scores, weights)  # noqa: E731
    def asked(center: str, scale: str, std=nan_std, eps: float = epsilon) -> Callable[[Generation], torch.Tensor]:
        return lambda m: advantages_of(rewards(m), size, center, scale, std, eps)

    out = []
    if scale_rewards != "none":
        for profile in VOCABULARY.profiles:
            other = profile.values[ADVANTAGE_EPSILON]
            if other != epsilon:
                out.append(Formula((), f"{ADVANTAGE_EPSILON} {other:g} (the {profile.name} profile's), where the "
                                   f"target declares {epsilon:g}: declare the definitions its trainer implements",
                                   asked("group", scale_rewards, eps=other)))  # fmt: skip
    if scale_rewards != "none":
        out += [Formula((48,), "divided by the population std (divisor n), not the Bessel-corrected one",
                        asked("group", scale_rewards, nan_pstd)),
                Formula((), "normalised over the generation batch (its mean and std), not per group",
                        asked("batch", "batch")),
                Formula((), "not divided by any std (scale_rewards='none')", asked("group", "none"))]  # fmt: skip
    if scale_rewards == "group":
        out += [Formula((49,), "divided by the generation batch's std, not the group's (scale_rewards='batch')",
                        asked("group", "batch")),
                Formula((), "centred on the generation batch's mean, not the group's (divided by the group's std)",
                        asked("batch", "group"))]  # fmt: skip
    if scale_rewards == "batch":
        out.append(Formula((), "divided by each group's std, not the batch's (scale_rewards='group')",
                           asked("group", "group")))  # fmt: skip
    if scale_rewards == "none":
        out += [Formula((), "centred on the generation batch's mean, not the group's", asked("batch", "none")),
                Formula((), "divided by the group's std (scale_rewards='group')", asked("group", "group")),
                Formula((), "divided by the batch's std (scale_rewards='batch')", asked("group", "batch"))]  # fmt: skip
    def unscored_zero(m: Generation) -> torch.Tensor:
        return advantages_of(rewards(m).nan_to_num(nan=0.0), size, "group", scale_rewards, epsilon=epsilon)

    out.append(Formula((50,), "an unscorable completion (no function scored it) rewarded 0", unscored_zero))
    if any(w != 1 for w in weights):
        ones = lambda m: advantages_of(weighted_rewards(m.scores, [1.0] * len(weights)), size, "group", scale_rewards,  # noqa: E731
                                       epsilon=epsilon)
        out.append(Formula((51,), "the reward weights not applied (every weight 1)", ones))
    if size != DEFAULT_GROUP:
        def fours(m: Generation) -> torch.Tensor:
            if len(m.scores) % DEFAULT_GROUP:
                return torch.full((len(m.scores),), math.nan, dtype=torch.float64)
            return advantages_of(rewards(m), DEFAULT_GROUP, "group", scale_rewards, epsilon=epsilon)

        out.append(Formula((81,), f"grouped in {DEFAULT_GROUP}s (a constant group size), not in groups of "
                           f"{size}", fours))  # fmt: skip
    out += other_order(weights, lambda m, w: advantages_of(weighted_rewards(m.scores, w), size, "group", scale_rewards,
                                                           epsilon=epsilon))  # fmt: skip
    return out + aggregation_formulas(weights, size, scale_rewards, aggregation, epsilon)


OTHER_ORDER = ("the reward weights paired with the functions in the other order than the target handed them over "
               "(the functions sorted by name, say)")  # fmt: skip


def other_order(weights: Sequence[float], advantages: Callable[[Generation, Sequence[float]], torch.Tensor]
                ) -> list[Formula]:  # fmt: skip
    """Class 86: two functions' weights swapped (`advantages(generation, weights)` under the run's formula), where
    the two weights differ."""
    if len(weights) != 2 or weights[0] == weights[1]:
        return []
    swapped = tuple(weights[::-1])
    return [Formula((86,), OTHER_ORDER, lambda m: advantages(m, swapped))]


Row = tuple[int, int, float, float]
"""(generation, batch row, logged advantage, the oracle's) of one trained row."""


def diagnose_advantages(made: Mapping[int, Generation], rows: Sequence[Row], spec, dtype: str,
                        epsilon: float = STD_EPS) -> tuple[Diagnosis | None, str, int]:  # fmt: skip
    """(the one known wrong formula that reproduces every logged advantage, '', the worst row's index in `rows`) or
    (None, why there is none, that index)."""
    tol = tolerance("advantage", dtype, TOLERANCES)
    worst = worst_row(rows, dtype)
    if not all(math.isfinite(got) for _, _, got, _ in rows):
        return None, "", worst
    weights = oracle.handed_weights(spec)
    found = []
    aggregation = getattr(spec, "multi_objective_aggregation", "sum_then_normalize")
    for f in formulas(weights, spec.num_generations, spec.scale_rewards, epsilon, aggregation):
        per_generation = {g: f.advantages(m) for g, m in made.items()}
        values = [float(per_generation[g][row]) for g, row, _, _ in rows]
        found.append((f.classes, f.formula, values, 1))
    wanted = [want for _, _, _, want in rows]
    norm = sum(w * w for w in wanted)
    c = sum(got * want for (_, _, got, want) in rows) / norm if norm > 0 else math.nan
    if math.isfinite(c) and abs(c - 1) > 1e-6:
        found.append(((), f"{c:.4g} times the oracle's advantage in every row (a common factor)",
                      [c * w for w in wanted], 2))  # fmt: skip
    matches = [(departures, classes, formula, values) for classes, formula, values, departures in found
               if all(abs(got - v) <= tol.allowed(v) for (_, _, got, _), v in zip(rows, values))]  # fmt: skip
    if not matches:
        return None, "no known wrong formula reproduces the logged advantages", worst
    fewest = min(m[0] for m in matches)
    best = [m for m in matches if m[0] == fewest]
    if len(best) > 1:
        return (
            None,
            f"no known wrong formula reproduces them unambiguously ({' / '.join(m[2] for m in best)} all do)",
            worst,
        )
    _, classes, formula, values = best[0]
    value = values[worst]
    said = f"{formula}: it gives all {len(rows)} logged advantages"
    return Diagnosis(classes, said, value, abs(rows[worst][2] - value), SOURCE), "", worst


def reward_stat_candidates(made: Mapping[int, Generation], rows, weights: Sequence[float]
                           ) -> dict[str, Callable[[], list[Candidate]]]:  # fmt: skip
    """For each reward statistic, the known wrong formulas' values over the completions `rows` name (each once):
    a population std (class 48), an unscorable completion rewarded 0 (class 50), the weights not applied (51), the
    last two at once, and two weights swapped (86); `weights` in the order the functions were handed over."""
    unique = sorted({(g, row) for g, row, *_ in rows})
    if not unique:
        return {}
    names = made[unique[0][0]].names
    scores = torch.stack([made[g].scores[row] for g, row in unique])
    rewards = weighted_rewards(scores, weights)
    unweighted = weighted_rewards(scores, [1.0] * len(weights))
    zeroed = rewards.nan_to_num(nan=0.0)
    pstd = "the population std (divisor n), not the Bessel-corrected one"
    zero = "an unscorable completion (no function scored it) rewarded 0"
    ones = "the reward weights not applied (every weight 1)"
    both = "the reward weights not applied and an unscorable completion rewarded 0 (a nansum of the scores)"
    unweighted_zeroed = unweighted.nan_to_num(nan=0.0)
    swapped = weighted_rewards(scores, weights[::-1]) if len(weights) == 2 and weights[0] != weights[1] else None

    def made_up(stat: Callable[[torch.Tensor], float], pstd_too: bool) -> list[Candidate]:
        out = [Candidate((48,), pstd, nan_pstd(rewards), SOURCE)] if pstd_too else []
        out.append(Candidate((50,), zero, stat(zeroed), SOURCE))
        if set(weights) != {1.0}:
            out += [Candidate((51,), ones, stat(unweighted), SOURCE),
                    Candidate((50, 51), both, stat(unweighted_zeroed), SOURCE, departures=2)]  # fmt: skip
        if swapped is not None:
            out.append(Candidate((86,), OTHER_ORDER, stat(swapped), SOURCE))
        return out

    out = {"reward": lambda: made_up(nan_mean, False), "reward_std": lambda: made_up(nan_std, True)}
    for f, name in enumerate(names):
        out[f"rewards/{name}/std"] = lambda f=f: [Candidate((48,), pstd, nan_pstd(scores[:, f]), SOURCE)]
    return out


def worst_row(rows: Sequence[Row], dtype: str) -> int:
    """The index of the row whose logged advantage is furthest off the oracle's, in tolerances (a NaN the worst;
    the first of equals)."""
    tol = tolerance("advantage", dtype, TOLERANCES)
    badness = [abs(got - want) / tol.allowed(want) for _, _, got, want in rows]
    return max(range(len(rows)), key=lambda i: (math.inf if math.isnan(badness[i]) else badness[i], -i))


def off_count(rows: Sequence[Row], dtype: str) -> int:
    """How many rows' logged advantage is off the oracle's (beyond the tolerance, or not a number)."""
    tol = tolerance("advantage", dtype, TOLERANCES)
    return sum(not abs(got - want) <= tol.allowed(want) for _, _, got, want in rows)


def across_logs(verdicts: Sequence[Sequence[MetricVerdict]], candidates: Sequence[Mapping[str, Callable]],
                dtype: str) -> list[list[MetricVerdict]]:  # fmt: skip
    """Each log's verdicts diagnosed (harness/diagnose.py), preferring for a metric the formulas that reproduce it in
    every log it was compared in: a log whose numbers cannot tell two formulas apart then names the one the other
    logs single out. A metric no formula reproduces everywhere is diagnosed log by log."""
    failing = {v.name for vs in verdicts for v in vs if v.failed}
    made = [{n: list(make()) for n, make in c.items() if n in failing} for c in candidates]
    everywhere: dict[str, set[str]] = {}
    for name in {n for m in made for n in m}:
        seen = [(v, {c.formula: c for c in m.get(name, ())}) for vs, m in zip(verdicts, made) for v in vs
                if v.name == name and v.logged is not None and math.isfinite(v.logged)]  # fmt: skip
        shared = set.intersection(*(set(c) for _, c in seen)) if seen else set()
        tol = tolerance(name, dtype, TOLERANCES)
        everywhere[name] = {f for f in shared if all(_close(v, c[f], tol) for v, c in seen)}
    out = []
    for vs, m in zip(verdicts, made):
        pick = {n: (lambda n=n, cs=cs: [c for c in cs if c.formula in everywhere[n]] or cs) for n, cs in m.items()}
        out.append(diagnosed(vs, pick, dtype, TOLERANCES))
    return out


def _close(verdict: MetricVerdict, candidate: Candidate, tol) -> bool:
    value = candidate.value
    return (
        value is not None and math.isfinite(value) and abs(verdict.logged - value) <= tol.allowed(value, verdict.scale)
    )
