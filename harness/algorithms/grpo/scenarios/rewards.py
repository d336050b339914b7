"""The GRPO gate's reward scenarios: advantages and reward statistics recomputed from the recorded scores.

Two reward functions with weights (1, -0.5), each unable to score some completions, and some completions neither can
score; two generations of four groups, one per logging interval; under each `scale_rewards`. `advantages` holds the
advantage of every row the loss saw to the oracle's (harness/algorithms/grpo/oracle/rewards.py), `reward_stats` each
interval's `reward`, `reward_std`, `frac_reward_zero_std` and `rewards/<name>/mean|std` to the oracle's over the
completions trained in it; both also with the functions handed over in the reversed order (reward_points.py). A
target that records no scores, or does not say which completion a loss row is, fails both as not recomputable; one
whose reward functions score every completion fails them as the target's to fix.
`completion_lengths` holds each interval's length statistics, clipped ratio and terminated lengths to the oracle's
(harness/algorithms/grpo/oracle/lengths.py) from the same run's masks and token ids; a target that keeps no ids, or
names no stop token, fails it so, and a trainer whose masks leave out the stop token fails it as the trainer's. A
failure names the known wrong formula that reproduces the logged numbers when one does (formulas.py; class 54 for the
lengths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from harness.compare import compare
from harness.diagnose import Candidate, diagnosed
from harness.instrument.observe import Observation, ObservationCache
from harness.oracle.numbers import finite_float
from harness.require import require, usable
from harness.scenario import Case, Scenario
from harness.unlogged import declared_unlogged, leave_out
from harness.verdict import Check, CheckResult, MetricStatus

from ..definitions import ADVANTAGE_EPSILON, NO_STOP, TRUNCATION
from ..instruments import recorded
from ..oracle import lengths, reward_model, rewards
from ..runs import MODEL, REWARDS, spec_for
from ..spec import SCALE_REWARDS, GRPOSpec
from ..tolerances import TOLERANCES
from ..wrong import formulas
from ..wrong.profiles import other_values
from . import reward_points
from .preconditions import definitions, require_logs, require_records
from .reward_points import AGGREGATED, GROUPS, REVERSED, reward_run

__all__ = ("REWARDS", "REWARD_RUNS", "REWARD_SCENARIOS", "recomputed", "reward_run")
REWARD_RUNS = reward_points.REWARD_RUNS

SHOWN = 3
"""Rows named one by one; the rest are counted."""
CLIPPED = "completions/clipped_ratio"


def advantage_epsilon(cache: ObservationCache) -> float:
    """The constant the target's trainer adds to the reward std (its declared `advantage_epsilon`; TRL's 1e-4 for a
    cache of a bare factory)."""
    target = cache.target
    return float(target.definition(ADVANTAGE_EPSILON, rewards.STD_EPS)) if target is not None else rewards.STD_EPS


def recomputed(obs: Observation, check: Check, epsilon: float = rewards.STD_EPS):
    """(the intervals' views, generations, every trained row), or None after failing the check; `epsilon` is the
    advantage's, as the target declares it (`advantage_epsilon`)."""
    per_interval = require_records(obs, check)
    if per_interval is None:
        return None
    read = reward_model.resolved(obs.ran, obs.spec)
    if isinstance(read, str):
        check.fail(f"not recomputable: {read}")
        return None
    calls, problems = read
    for line in problems[:SHOWN]:
        check.fail(line)
    if len(problems) > SHOWN:
        check.fail(f"... and {len(problems) - SHOWN} more rows a reward model scored that are not their completion")
    made = rewards.generations(calls, obs.spec, epsilon)
    if isinstance(made, str):
        check.fail(f"not recomputable: {made}")
        return None
    rows = [rewards.trained_rows(interval.records, made) for interval in per_interval]
    bad = next((r for r in rows if isinstance(r, str)), None)
    if bad is not None:
        check.fail(f"not recomputable: {bad}")
        return None
    return per_interval, made, rows


def what_is_missing(made, rows, spec) -> str:
    """What the trained completions lack for the scenario to mean something, or ''. Their scores are the target's
    reward functions': a run whose functions score every completion is the target's to fix."""
    trained = {(g, row) for interval in rows for g, row, *_ in interval}
    scores = [made[g].scores[row] for g, row in trained]
    unscored = sum(bool(s.isnan().all()) for s in scores)
    partly = sum(bool(s.isnan().any() and not s.isnan().all()) for s in scores)
    moved = sum(bool(made[g].advantages[row] != 0) for g, row in trained)
    if not (unscored and partly):
        weights = rewards.handed_weights(spec)
        n = len(weights)
        return (f"the target's reward functions do not make this scenario: with reward_weights={weights} the target "
                f"must hand its trainer {n} partial reward function{'s' if n != 1 else ''}, each unable to score "
                f"some completions (NaN), and some completions {'neither' if n == 2 else 'none of them'} can score; "
                f"of the {len(trained)} trained completions {unscored} no reward function scored and {partly} only "
                f"some did (docs/using-the-gate.md, section 7)")  # fmt: skip
    if not moved:
        return f"of the {len(trained)} trained completions none has a non-zero advantage (at least one must)"
    return ""


def stop_after_mask(per_interval, stop_token_id) -> int:
    """How many trained completions hold no stop token in their mask but have it right after the mask ends: a
    trainer's mask that drops the stop token."""
    found = set()
    for interval in per_interval:
        for record in interval.records:
            mask, ids = record.completion_mask.bool(), record.completion_ids
            if ids is None or record.completions is None or stop_token_id is None:
                continue
            ids = torch.as_tensor(ids)
            ends = mask.sum(dim=1)
            inside = ((ids == int(stop_token_id)) & mask).any(dim=1)
            for j, index in enumerate(torch.as_tensor(record.completions).reshape(-1).tolist()):
                after = int(ends[j])
                if not inside[j] and after < ids.shape[1] and int(ids[j, after]) == int(stop_token_id):
                    found.add((int(record.generation), int(record.rank), int(index)))
    return len(found)


def advantages(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Every advantage the loss saw equals the oracle's, from the recorded scores, weights and groups. A failure is
    the worst row, with how many rows are off, and the known wrong formula that gives every logged advantage when
    one does (formulas.py)."""
    check, obs = Check(case.id), reward_run(cache, run, case)
    seen = recomputed(obs, check, advantage_epsilon(cache))
    if seen is None:
        return check.finish()
    per_interval, made, rows = seen
    missing = (what_is_missing(made, rows, obs.spec) or reward_points.order_honoured(cache, obs)
               or reward_points.told_from_the_default(made, rows, obs.spec, advantage_epsilon(cache)))  # fmt: skip
    if require(check, not missing, missing):
        judge_advantages(check, obs, per_interval, made, rows, advantage_epsilon(cache))
    return check.finish()


def judge_advantages(check: Check, obs: Observation, per_interval, made, rows,
                     epsilon: float = rewards.STD_EPS) -> None:  # fmt: skip
    """Every trained row's advantage against the oracle's: the worst row, how many are off, and the known wrong
    formula that gives every logged advantage when one does."""
    compared, places = [], []
    for log, (interval, trained) in enumerate(zip(per_interval, rows)):
        for generation, row, k, j in trained:
            logged = float(interval.records[k].advantages[j])
            compared.append((generation, row, logged, float(made[generation].advantages[row])))
            places.append(f"generation {generation} completion {row} (log {log + 1}, micro-batch {k + 1}, row {j + 1}")
    if not compared:
        check.fail("no loss row to compare")
        return
    dtype, worst = obs.spec.dtype, formulas.worst_row(compared, obs.spec.dtype)
    off = formulas.off_count(compared, dtype)
    where = places[worst] + (f"; the worst of {off} of {len(compared)} rows off)" if off > 1 else ")")
    _, _, logged, expected = compared[worst]
    verdicts = compare({"advantage": logged}, {"advantage": expected}, dtype, TOLERANCES, where=where)
    if any(v.status is MetricStatus.FAIL for v in verdicts):
        diagnosis, why, _ = formulas.diagnose_advantages(made, compared, obs.spec, dtype, epsilon)
        verdicts = [dataclasses.replace(v, diagnosis=diagnosis, diagnosis_reason=why) for v in verdicts]
    check.absorb(verdicts)


def reward_stats(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Each interval's reward statistics equal the oracle's over the completions it trained, each once."""
    check, obs = Check(case.id), reward_run(cache, run, case)
    seen = recomputed(obs, check, advantage_epsilon(cache))
    if seen is None:
        return check.finish()
    per_interval, made, rows = seen
    if case.param("run", None) == "small_groups":
        few = [i + 1 for i, trained in enumerate(rows)
               if any(e.count == 0 for e in rewards.reward_stats(made, trained).values())]  # fmt: skip
        if not require(check, few, "no interval had a reward statistic over too few scores (a function scoring "
                       "fewer than two of its completions)"):  # fmt: skip
            return check.finish()
    apart = reward_points.order_honoured(cache, obs) or reward_points.stats_told_apart(made, rows, obs.spec)
    if not require(check, not apart, apart):
        return check.finish()
    judge_reward_stats(check, obs, made, rows, declared_unlogged(cache))
    return check.finish()


def judge_reward_stats(check: Check, obs: Observation, made, rows, unlogged: Sequence[str] = ()) -> None:
    """Each interval's logged reward statistics against the oracle's over the completions it trained, but those the
    target declares its trainer does not log (`unlogged`: harness/unlogged.py)."""
    expected = [rewards.reward_stats(made, interval) for interval in rows]
    if not require(check, all(expected), "an interval trained no completion") or not require_logs(obs, (), check):
        return
    named = list(dict.fromkeys(n for want in expected for n in want))
    kept = leave_out(check, obs.ran.logs, named, unlogged, obs.spec.split_label)
    expected = [{n: e for n, e in want.items() if n in kept} for want in expected]
    weights, per_log = rewards.handed_weights(obs.spec), []
    for index, want in enumerate(expected):
        log, where = obs.ran.logs[index], f"log {index + 1}" if len(expected) > 1 else None
        # over no score (a mean) or fewer than two (a std) the contract logs 0, but leaves it open (section 8):
        # TRL logs NaN there, which its log() drops
        empty = [n for n, e in want.items() if e.count == 0 and finite_float(log.get(n)) is None]
        if empty:
            check.note(f"{where or 'the log'}: {', '.join(empty)} over too few scores, not logged as a number: open")
        wanted = {n: e for n, e in want.items() if n not in empty}
        per_log.append(compare(log, wanted, obs.spec.dtype, TOLERANCES, where=where))
    made_up = [formulas.reward_stat_candidates(made, trained, weights) for trained in rows]
    for verdicts in formulas.across_logs(per_log, made_up, obs.spec.dtype):
        check.absorb(verdicts)


def reward_model_check(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """With a reward model among the reward functions: each of its scores read from its head at the scored sequence's
    last token (reward_model.py), every row it scored is its prompt and completion, and every advantage and each
    interval's reward statistics equal the oracle's from those scores; also under 'normalize_then_sum' (both
    functions score every completion, so the weights meet two normalised scores)."""
    aggregation = case.param("multi_objective_aggregation", run.multi_objective_aggregation)
    check, obs = Check(case.id), cache.get(spec_for(MODEL, run).with_(multi_objective_aggregation=aggregation), False)
    seen = recomputed(obs, check, advantage_epsilon(cache))
    if seen is None:
        return check.finish()
    per_interval, made, rows = seen
    watched = [c for c in recorded(obs.ran).reward_calls or () if c.head is not None]
    trained = [(g, row) for interval in rows for g, row, *_ in interval]
    column = 1  # the model is the second reward function (MODEL's weights)
    scored = sum(not bool(made[g].scores[row, column].isnan()) for g, row in trained) if watched else 0
    moved = sum(bool(made[g].advantages[row] != 0) for g, row in trained)
    if not require(check, watched, "the target recorded no reward-model call: with reward_model set it must hand "
                   "its trainer the toy world's reward model as its second reward function, watched with "
                   "RewardTap.watch (docs/using-the-gate.md, section 7)"):  # fmt: skip
        return check.finish()
    if not require(check, scored == len(trained) and moved,
                   f"of the {len(trained)} trained completions the reward model scored {scored} (all must be) and "
                   f"{moved} have a non-zero advantage (at least one)"):  # fmt: skip
        return check.finish()
    judge_advantages(check, obs, per_interval, made, rows, advantage_epsilon(cache))
    judge_reward_stats(check, obs, made, rows, declared_unlogged(cache))
    if not check.failed:
        check.note(f"{len(watched)} reward-model calls, {scored} completions scored at the head of their last token")
    return check.finish()


def completion_lengths(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Each interval's completion length statistics equal the oracle's over the completions it trained, each once,
    from their masks and ids (lengths.py). The run must train a completion that ended with the stop token and one
    that ran to max_completion_length, or the terminated statistics and the clipped ratio would test nothing."""
    check, obs = Check(case.id), reward_run(cache, run, case)
    per_interval = require_records(obs, check)
    if per_interval is None:
        return check.finish()
    trained = [lengths.trained_completions(interval.records, obs.ran.stop_token_id, obs.ran.pad_token_id)
               for interval in per_interval]  # fmt: skip
    bad = next((t for t in trained if isinstance(t, str)), None)
    if bad is not None:
        check.fail(f"not recomputable: {bad}")
        return check.finish()
    if not require(check, all(trained), "an interval trained no completion"):
        return check.finish()
    cap, every = obs.spec.max_completion_length, [c for t in trained for c in t]
    stopped, full = sum(c.terminated for c in every), sum(c.length == cap for c in every)
    dropped = 0 if stopped else stop_after_mask(per_interval, obs.ran.stop_token_id)
    if dropped:
        check.fail(f"no trained completion's mask holds the stop token, though {dropped} of the {len(every)} have it "
                   f"right after their mask: the trainer's mask drops it, which is the trainer's to fix, not the "
                   f"scenario's (its mask must include the stop token: docs/grpo-metrics.md, \"mask\")")  # fmt: skip
        return check.finish()
    if not require(check, stopped and full, f"of the {len(every)} trained completions {stopped} ended with the stop "
                   f"token and {full} ran to max_completion_length={cap} (at least one of each)"):  # fmt: skip
        return check.finish()
    truncation = dict(definitions(cache)).get(TRUNCATION, NO_STOP)
    names = leave_out(check, obs.ran.logs, lengths.LENGTH_NAMES, declared_unlogged(cache), obs.spec.split_label)
    if not require_logs(obs, names, check):
        return check.finish()
    for index, completions in enumerate(trained):
        where = f"log {index + 1}" if len(trained) > 1 else None
        logged = usable(obs.ran.logs[index], names)  # require_logs named the others
        stats = {n: e for n, e in lengths.length_stats(completions, cap, truncation).items() if n in logged}
        verdicts = compare(obs.ran.logs[index], stats, obs.spec.dtype, TOLERANCES, where=where)
        check.absorb(pad_diagnosed(verdicts, completions, obs.spec.dtype, cap, truncation))
        if any(v.failed for v in verdicts) and _pad_explains(obs.ran.logs[index], completions, obs.spec.dtype, logged):
            check.note(f"{where or 'the log'}: the logged values are those of a trainer that counts a completion "
                       f"whose last token is the pad as ended with the stop token")  # fmt: skip
    return check.finish()


def pad_diagnosed(verdicts, completions, dtype, cap=None, truncation=NO_STOP) -> list:
    """`verdicts` with each failing statistic diagnosed when a trainer that takes a final pad for the stop token
    (class 54) logs it, or, for the clipped ratio, another profile's `truncation` (wrong/profiles.py)."""
    padded, said = lengths.pad_as_stop(completions), "a completion whose last token is the pad counted as ended"
    wrong = lengths.length_stats(padded, cap, truncation) if padded != completions else {}
    make = {n: [Candidate((54,), f"{said} with the stop token", wrong[n].value, "loss records")] for n in wrong}
    for words, theirs in other_values({TRUNCATION: truncation}):
        value = lengths.length_stats(completions, cap, theirs[TRUNCATION])[CLIPPED].value
        make.setdefault(CLIPPED, []).append(Candidate((), words, value, "loss records"))
    return diagnosed(verdicts, {n: (lambda c=c: c) for n, c in make.items()}, dtype, TOLERANCES)


def _pad_explains(log, completions, dtype, names) -> bool:
    """Whether the logged length statistics of `names` are those of a trainer that takes a final pad for the stop
    token."""
    padded = lengths.pad_as_stop(completions)
    wrong = {n: e for n, e in lengths.length_stats(padded).items() if n in names}
    return padded != completions and not any(v.failed for v in compare(log, wrong, dtype, TOLERANCES))


REWARD_SCENARIOS = (
    Scenario("advantages", advantages, (("scale_rewards", SCALE_REWARDS),),
             "two weighted reward functions, some completions unscored: every advantage == oracle's from the scores "
             "(also each function normalised in its group first: multi_objective_aggregation='normalize_then_sum'; "
             "groups of 8; and the two functions handed over in the reversed order, each with its weight)",
             points=(AGGREGATED, GROUPS, REVERSED)),
    Scenario("reward_stats", reward_stats, (("scale_rewards", SCALE_REWARDS),),
             "the same runs: reward, reward_std, frac_reward_zero_std, rewards/<name>/* per interval == oracle's; "
             "also logged per group of 4 (statistics over too few scores: 0, or not a number), with one function "
             "and no weights (the default 1), under 'normalize_then_sum' (its zero std the batch's), in groups of 8 "
             "and with the functions in the reversed order",
             points=((("run", "small_groups"),), (("run", "one_function"),), AGGREGATED, GROUPS, REVERSED)),
    Scenario("reward_model", reward_model_check, (),
             "a reward model as the second function: its scores read from its head at each sequence's last token; "
             "advantages and reward statistics == oracle's (also under 'normalize_then_sum', where both functions "
             "score every completion and the weights meet each one's normalised scores)",
             points=((), AGGREGATED)),
    Scenario("completion_lengths", completion_lengths, (),
             "the same run: completions/*_length, clipped_ratio, *_terminated_length per interval == oracle's "
             "from the masks and ids"),
)  # fmt: skip
