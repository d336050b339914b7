"""The GRPO gate's scenarios of pooled statistics (`scenarios/__init__.py` assembles every family into
SCENARIOS). Each reads top-down: run, check what it saw, expect, compare.

Every scenario first checks that it saw what it exists for (a loss record per micro-batch
in windows of the expected sizes, every metric logged and finite, the uneven lengths, the
short window, the clipped tokens or the empty micro-batches it needs) and fails otherwise.
The specs are plain `GRPOSpec`s, so any GRPO target runs them.
"""

from __future__ import annotations

import torch

from harness.instrument.observe import ObservationCache
from harness.require import require
from harness.scenario import Case, Scenario
from harness.unlogged import declared_unlogged
from harness.verdict import Check, CheckResult

from ..contract import EXTREMES, KL, pooled_names
from ..runs import (
    ALL_MASKED,
    EMPTY,
    FRESH,
    NO_KL,
    SHORT,
    SOFT,
    UNEVEN,
    asymmetric_clip_spec,
    at_cap_spec,
    clipping,
    off_policy_spec,
    sequence_level_spec,
    spec_for,
)
from ..spec import LOSS_TYPES, GRPOSpec
from .cuts import PARTITION
from .preconditions import (
    compare_interval,
    declared,
    definitions,
    logged_names,
    per_cadence,
    require_logs,
    require_records,
    run_logs,
    window_sizes,
)
from .sequence import flagged_completions


def pooled_check(cache, obs, check: Check, need=None, empty_may_lack=()) -> None:
    """Every interval's pooled metrics against the oracle fed that interval's records, the intervals those the
    target's `logging_cadence` logs (`per_cadence`); `need(intervals)` says
    whether the run showed what the scenario is for (a string naming what is missing, or ''); the optional metrics
    the cache's target declares it logs are held to; `empty_may_lack`: the names an interval with no completion
    token may leave out (a note, not a failure). A metric not logged as a finite number fails the check, named, and
    every other is still compared, each with its own verdict; those the target declares its trainer does not log are
    left out (harness/unlogged.py)."""
    obs = per_cadence(obs, check, definitions(cache))
    names = logged_names(run_logs(obs), pooled_names(obs.spec.beta, obs.spec.loss_type), check, declared(cache),
                         obs.spec.split_label, declared_unlogged(cache))  # fmt: skip
    per_interval = require_records(obs, check, definitions(cache))
    if per_interval is None:
        return
    may_lack = {i.index: empty_may_lack for i in per_interval if sum(i.token_counts()) == 0}
    if not require_logs(obs, names, check, may_lack):
        return
    missing = need(per_interval) if need else ""
    if not require(check, not missing, missing):
        return
    for interval in per_interval:
        compare_interval(obs, interval, check, names)


def uneven_lengths(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Micro-batches of different token counts: each interval's pooled metrics equal the oracle's."""
    check = Check(case.id)
    obs = cache.get(spec_for(UNEVEN, run).with_(loss_type=case.param("loss_type", run.loss_type)), spy=False)

    def need(per_interval):
        even = [i.index + 1 for i in per_interval if len(set(i.token_counts())) < 2]
        return f"interval(s) {even} had micro-batches of equal token counts" if even else ""

    pooled_check(cache, obs, check, need)
    return check.finish()


def at_the_cap(per_interval) -> str:
    """What the cispo run at its cap is for: a token of positive advantage whose ratio is exactly the cap."""
    for interval in per_interval:
        cap = interval.settings.epsilon_high
        at_cap = [(t.ratio == cap) & t.mask & (r.advantages > 0).unsqueeze(1)
                  for r, t in zip(interval.records, interval.terms)]  # fmt: skip
        if not any(bool(flags.any()) for flags in at_cap):
            return f"interval {interval.index + 1}: no token's ratio is exactly the cap {cap}"
    return ""


def short_window(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Windows of 3 and 1 micro-batches in one interval (TRL issue 7047): pooled over tokens, not over windows."""
    check, obs = Check(case.id), cache.get(spec_for(SHORT, run), spy=False)

    def need(per_interval):
        records = [r for interval in per_interval for r in interval.records]
        sizes = window_sizes(records)
        spans = any(len({r.generation for r in records if r.window == w}) > 1 for w in range(len(sizes)))
        return "" if len(set(sizes)) > 1 or spans else f"windows of {sizes} micro-batches, none across generations"

    pooled_check(cache, obs, check, need)
    return check.finish()


def off_policy(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Ratios far from 1 under cispo, sapo or vespo: each interval's pooled metrics (cispo_clip_ratio,
    vespo/phi_seq_mean, policy_loss, entropy, kl) equal the oracle's. cispo also runs on policy with its cap at 1,
    every ratio exactly the cap: a token is clipped only when r > epsilon_high, not at the cap itself."""
    check = Check(case.id)
    obs = cache.get(off_policy_spec(run, case.param("loss_type")), spy=False)
    spec = obs.spec

    def need(per_interval):
        for interval in per_interval:
            terms = interval.terms
            spread = max((float(((t.ratio - 1).abs() * t.mask).max()) for t in terms if t.mask.any()), default=0.0)
            if spread < 0.05:
                return f"interval {interval.index + 1}: every ratio within {spread:.3g} of 1"
            if spec.loss_type == "cispo":
                capped = [bool(((t.ratio > spec.epsilon_high) & t.mask).any()) for t in terms]
                free = [bool(((t.ratio <= spec.epsilon_high) & t.mask).any()) for t in terms]
                if not (any(capped) and any(free)):
                    return f"interval {interval.index + 1}: no weight on both sides of epsilon_high {spec.epsilon_high}"
        return weighted(per_interval) if spec.loss_type == "vespo" else ""

    pooled_check(cache, obs, check, need)
    if spec.loss_type == "cispo":
        pooled_check(cache, cache.get(at_cap_spec(run), spy=False), check, at_the_cap)
    return check.finish()


DEFAULT_EPSILON = GRPOSpec().epsilon_low
"""TRL's default epsilon (both clip bounds): the constant a trainer that ignores the setting clips its flags at."""


def extremes(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """clip_ratio/low_min and high_max are true extremes over the interval's completions, and the other
    pooled metrics hold, with tokens clipped in some micro-batches and not in others. `run=sequence_level`: the
    same at importance_sampling_level 'sequence' (GSPO), where each clip flag is one per completion and its means
    pool over completions, with completions clipped and others not in each interval. `run=clip_asymmetric`: the
    same on logp_gradient[run=clip_asymmetric]'s run (epsilon_low 0.05, epsilon_high 0.6, or the run's own bounds
    where they differ), which must hold a token whose flag differs from its flag at TRL's default epsilon 0.2: the
    flags' bounds are the settings', not a constant. `run=sequence_level,loss_type=cispo`: cispo's flag, one per
    completion there, in cispo_clip_ratio over completions (scenarios/sequence.py), with the other pooled metrics of
    logp_gradient's run of it, and on policy at its cap 1 (every completion's ratio the cap itself, flagged only above
    it). `run=sequence_level,loss_type=vespo`: vespo/phi_seq_mean and the rest on logp_gradient's vespo run."""
    sequence_level = case.param("run") == "sequence_level"
    asymmetric = case.param("run") == "clip_asymmetric"
    check = Check(case.id)
    if sequence_level:
        spec = sequence_level_spec(run, case.param("loss_type", "grpo"))
    else:
        spec = asymmetric_clip_spec(run) if asymmetric else clipping(run)
    obs = cache.get(spec, spy=False)

    def off_default(per_interval):
        told = 0
        for interval in per_interval:
            for r, t in zip(interval.records, interval.terms):
                sign = r.advantages.double().unsqueeze(1)
                low = ((t.ratio < 1 - DEFAULT_EPSILON) & (sign < 0)).double()
                high = ((t.ratio > 1 + DEFAULT_EPSILON) & (sign > 0)).double()
                told += int((((low != t.low) | (high != t.high)) & t.mask).sum())
        if told:
            check.note(f"{told} tokens whose clip flag at these bounds differs from its flag at {DEFAULT_EPSILON}")
            return ""
        return (f"no token's clip flag at epsilon_low {spec.epsilon_low} and epsilon_high {spec.epsilon_high} "
                f"differs from its flag at {DEFAULT_EPSILON}: the run does not tell the settings from the default")

    def whole(per_interval):
        if spec.loss_type == "vespo":
            return weighted(per_interval)
        for interval in per_interval:
            flags = [flagged_completions(t, spec.loss_type) for t in interval.terms if t.mask.any()]
            flags = torch.cat(flags or [torch.zeros(0)])
            clipped = int(flags.sum())
            if not 0 < clipped < flags.numel():
                return (f"interval {interval.index + 1}: {clipped} of its {flags.numel()} completions clipped: "
                        f"none to tell a mean over completions from one over tokens")  # fmt: skip
        return ""

    def need(per_interval):
        for interval in per_interval:
            maxima = set()
            for terms in interval.terms:
                has = terms.mask.any(dim=1)
                if has.any():
                    maxima.add(float(terms.per_completion(terms.high)[has].max()))
            if len(maxima) < 2 or max(maxima) == 0:
                return f"the micro-batches' largest high-clip fractions were {sorted(maxima)}: no extreme to tell"
        return ""

    pooled_check(cache, obs, check, whole if sequence_level else off_default if asymmetric else need)
    if sequence_level and spec.loss_type == "cispo":
        at_cap = at_cap_spec(run).with_(importance_sampling_level="sequence")
        pooled_check(cache, cache.get(at_cap, spy=False), check, at_the_cap)
    return check.finish()


def weighted(per_interval) -> str:
    """What a vespo run is for: in every interval, a sequence weight phi 0.01 or more off 1 (vespo/phi_seq_mean
    tells then a mean over completions from one over tokens, and phi from 1)."""
    for interval in per_interval:
        phis = torch.cat([t.phi for t in interval.terms])
        if float((phis - 1).abs().max()) < 0.01:
            return f"interval {interval.index + 1}: every sequence weight phi within 0.01 of 1"
    return ""


def freshness(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Logged every step: each log equals an oracle fed only that interval's records (nothing carried over)."""
    check, obs = Check(case.id), cache.get(spec_for(FRESH, run), spy=False)
    pooled_check(cache, obs, check, lambda per: "" if len(per) > 1 else "only one interval was logged")
    return check.finish()


def all_masked(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Micro-batches with no completion token add nothing: no NaN, no zero pulling a mean down."""
    check, obs = Check(case.id), cache.get(spec_for(ALL_MASKED, run), spy=False)

    def need(per_interval):
        counts = [c for interval in per_interval for c in interval.token_counts()]
        return "" if 0 in counts else f"no all-masked micro-batch was seen (tokens per micro-batch {counts})"

    pooled_check(cache, obs, check, need)
    return check.finish()


def empty_interval(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """An interval with no completion token at all logs the contract's values over nothing: 0 for every token
    mean, for both extremes and for `policy_loss` (vespo's `phi` of an empty completion is phi(1) = 1), never NaN
    and never a value carried from elsewhere (docs/grpo-metrics.md, sections 2 and 8). The extremes may be left
    out there, with a note, as the reward statistics over too few scores may: TRL masks only truncated
    completions, so its empty intervals are one-row micro-batches that ran to the limit, and it logs the extremes
    there as NaN, which its `log()` drops."""
    check, obs = Check(case.id), cache.get(spec_for(EMPTY, run), spy=False)

    def need(per_interval):
        tokens = [sum(i.token_counts()) for i in per_interval]
        return "" if 0 in tokens else f"no interval without a completion token (tokens per interval {tokens})"

    pooled_check(cache, obs, check, need, EXTREMES)
    return check.finish()


def no_kl(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """beta 0, so no KL term: no log has `kl` (the contract logs it only when beta != 0, as TRL's GRPOTrainer
    appends it only then), and the other pooled metrics equal the oracle's. One micro-batch per interval."""
    check = Check(case.id)
    obs = cache.get(spec_for(NO_KL, run).with_(beta=0.0), spy=False)
    pooled_check(cache, obs, check)
    logs = obs.ran.logs if obs.ran is not None else ()
    with_kl = [i + 1 for i, log in enumerate(logs) if KL in log]
    if with_kl:
        check.fail(f"{KL} logged at beta 0 in log(s) {with_kl} ({KL}={logs[with_kl[0] - 1][KL]}): the contract logs "
                   f"{KL} only when beta != 0")  # fmt: skip
    return check.finish()


POOLED_SCENARIOS = (
    Scenario("uneven_lengths", uneven_lengths, (("loss_type", LOSS_TYPES),),
             "micro-batches of uneven token counts, LR 1e-3, beta 0.04: each interval pooled == oracle"),
    Scenario("short_window", short_window, (),
             "windows of 3 and 1 micro-batches in one interval (TRL issue 7047): pooled == oracle"),
    Scenario("extremes", extremes, (),
             "two passes at LR 0.05, tokens clipped: low_min / high_max true extremes, pooled == oracle (also at "
             "importance_sampling_level 'sequence' under grpo and cispo: flags per completion, pooled over "
             "completions, cispo's at its cap too; vespo's phi there; and at epsilon_low 0.05, epsilon_high 0.6: "
             "flags at the settings' bounds, not 0.2)",
             ((), (("run", "sequence_level"),), (("run", "clip_asymmetric"),),
              *((("run", "sequence_level"), ("loss_type", t)) for t in ("cispo", "vespo")))),
    Scenario("freshness", freshness, (), "logged every step: each log == an oracle fed only its interval"),
    Scenario("all_masked", all_masked, (), "all-masked micro-batches add nothing: no NaN, no zero in the mean"),
    Scenario("empty_interval", empty_interval, (),
             "logged every one-row micro-batch, pad bias 3.5: an interval with no token logs 0 (vespo's phi 1), "
             "never NaN or another interval's value; its extremes may be left out (a note)"),
    Scenario("no_kl", no_kl, (), "beta 0, one micro-batch per interval: no `kl` logged, the rest pooled == oracle"),
    PARTITION,
    Scenario("off_policy", off_policy, (("loss_type", SOFT),),
             "two passes at LR 0.05 under cispo (epsilon_high 1), sapo (temperatures 2, 0.5), vespo (k, lambda 3, 2 "
             "and 2, 3): ratios far from 1, pooled == oracle"),
)  # fmt: skip
