"""The PPO gate's scenarios. Each reads top-down: run, view, expect, compare; none passes on what it did not see.

Every scenario first checks that it saw what it expected (the micro-batch row counts, every
metric present and finite, spy records where it needs them, the padding or empty
micro-batches it exists for) and fails otherwise. The specs are plain `ScenarioSpec`s, so
any PPO target runs them. Check ids come from `Scenario.cases()`.
"""

from __future__ import annotations

from harness.compare import compare
from harness.instrument.observe import ObservationCache
from harness.scenario import Case, Scenario
from harness.tolerances import tolerance
from harness.verdict import Check, CheckResult

from . import signal
from .checks import compare_pooled, oracle_update, require, require_logs, require_ran, require_view
from .contract import LR0_IDENTITIES, POOLED_NAMES, POOLED_STATS, RATIO_VAR, ROLLOUT
from .expect import expected_metrics
from .partitions import partition_invariance
from .poolings import Geometry, diagnose_identities
from .rollout_poolings import diagnose_rollout
from .spec import SETTINGS, ScenarioSpec

# The uneven split: micro-batches of 4 and 2 rows, a learning rate that moves the policy.
UNEVEN = ScenarioSpec(name="uneven_split", learning_rate=1e-3, total_updates=2)
EVEN = UNEVEN.with_(name="even_split", per_device_train_batch_size=6, gradient_accumulation_steps=2, total_updates=1)
LR0 = UNEVEN.with_(name="lr0_ratio", learning_rate=0.0, total_updates=1)
GRADIENT_CUTS = ((4, 3), (2, 6), (6, 2), (3, 4))
"""Cuts of the same minibatches of 6 rows into micro-batches: 4+2, 2+2+2, 6, 3+3."""
ALL_MASKED = UNEVEN.with_(
    name="all_masked",
    per_device_train_batch_size=1,
    gradient_accumulation_steps=12,
    pad_logit_bias=2.5,
    total_updates=1,
)
EMPTY_UPDATE = UNEVEN.with_(name="empty_update", pad_logit_bias=40.0, total_updates=1)
PADDING_ROWS = UNEVEN.with_(name="padding_rows", rollout_chunk=5, total_updates=1)
ROLLOUTS = {"uneven_split": UNEVEN, "padding_rows": PADDING_ROWS}
"""The runs whose rollout objectives are checked: the uneven split, and a rollout cut into chunks of 5."""


PROFILES = {
    "temperature": {"temperature": 0.7},
    "k3": {"kl_estimator": "k3"},
    "whiten_eos": {"whiten_rewards": True, "missing_eos_penalty": 1.0},
    "clipped": {"max_grad_norm": 1.0},
}
"""The settings sweep: each profile changes the run-wide settings of the checks in SWEPT."""


def spec_for(base: ScenarioSpec, run: ScenarioSpec) -> ScenarioSpec:
    """`base` with the run-wide settings of `run`: seed, device, dtype, and every trainer setting."""
    return base.with_(seed=run.seed, device=run.device, dtype=run.dtype, **{k: getattr(run, k) for k in SETTINGS})


def uneven_split(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Pooled metrics of the 4+2 split (real padding, non-zero learning rate) equal the oracle's."""
    check, obs = Check(case.id), cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=case.param("epochs", 1)))
    update = oracle_update(obs, 0, check)
    if update is not None and require(check, update.padded_rows(), "no response was padded"):
        compare_pooled(obs, update, check)
    return check.finish()


def even_split(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Two micro-batches of 6 rows per update (the smallest val/ratio_var), non-zero LR: pooled equals the oracle."""
    check, obs = Check(case.id), cache.get(spec_for(EVEN, run))
    update = oracle_update(obs, 0, check)
    if update is not None:
        compare_pooled(obs, update, check)
    return check.finish()


def freshness(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """The second update's metrics equal an oracle fed only the second update's records."""
    check, obs = Check(case.id), cache.get(spec_for(UNEVEN, run))
    view = require_view(obs, check)
    if view is not None and require_logs(obs, POOLED_STATS, check):
        compare_pooled(obs, view.updates[1], check, earlier=view.updates[0])
    return check.finish()


def rollout_objectives(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """`objective/*` of every update against the oracle (sums over R only, means over real samples)."""
    check, obs = Check(case.id), cache.get(spec_for(ROLLOUTS[case.param("rollout", "uneven_split")], run))
    view = require_view(obs, check)
    if view is None or not require_logs(obs, ROLLOUT, check):
        return check.finish()
    scores = obs.ran.scores
    scores = scores if scores and len(scores) == len(view.updates) else [None] * len(view.updates)
    for i, update in enumerate(view.updates):
        spec = obs.spec
        expected = expected_metrics(update, spec.kl_coef, spec.kl_estimator, scores[i], spec.missing_eos_penalty)
        where = f"update {i + 1}" if len(view.updates) > 1 else None
        logged = obs.ran.logs[i]
        verdicts = compare({n: logged[n] for n in ROLLOUT}, {n: expected[n] for n in ROLLOUT}, spec.dtype, where=where)
        check.absorb(diagnose_rollout(verdicts, update.rollout, expected, spec))
    return check.finish()


def training_signal(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """The per-token losses and clip indicators handed to masked_mean follow from the rollout: the raw
    advantages (and rewards) at the whitening calls equal the oracle's GAE from the recorded log-probs, values
    and scores; the policy loss is the clipped surrogate of the whitened advantages and the micro-batch's own
    ratio; the value loss is the clipped squared error to the returns (docs/metrics.md, "The update")."""
    check = Check(case.id)
    obs = cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=case.param("epochs", 1)))
    view = require_view(obs, check)
    if view is None:
        return check.finish()
    scores = obs.ran.scores
    scores = scores if scores and len(scores) == len(view.updates) else [None] * len(view.updates)
    for update, score in zip(view.updates, scores):
        logged, expected = signal.expectations(update, obs.spec, score)
        where = f"update {update.index + 1}"
        check.absorb(compare(logged, expected, obs.spec.dtype, kind="formula", where=where))
    return check.finish()


def lr0_ratio(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At learning rate 0: val/ratio == 1, val/ratio_var == 0, approxkl == 0, clipfrac == 0. No spy needed."""
    check = Check(case.id)
    obs = cache.get(spec_for(LR0, run).with_(num_ppo_epochs=case.param("epochs")), spy=False)
    if require_logs(obs, LR0_IDENTITIES, check):
        verdicts = compare(obs.ran.logs[0], LR0_IDENTITIES, obs.spec.dtype, kind="identity")
        check.absorb(diagnose_identities(verdicts, obs.spec))
    return check.finish()


def largest_gap(check: Check, gaps: list[tuple[str, float]], dtype: str) -> None:
    """Report the largest relative gradient gap of a check, and its tolerance, as a metric (fails above it)."""
    if gaps:
        where, gap = max(gaps, key=lambda item: item[1])
        check.absorb(compare({"gradient": gap}, {"gradient": 0.0}, dtype, kind="gradient", where=where))


def gradient_partition(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At LR 0, each optimizer step's gradient is the same however its minibatch is cut into micro-batches."""
    check = Check(case.id)
    base = spec_for(LR0, run).with_(name="gradient_partition")
    observed = [cache.get(base.with_(per_device_train_batch_size=b, gradient_accumulation_steps=g))
                for b, g in GRADIENT_CUTS]  # fmt: skip
    if not all([require_ran(o, check) for o in observed]):
        return check.finish()
    first = observed[0]
    if not first.ran.grads.steps:
        check.fail("no optimizer step was seen")
        return check.finish()
    gaps = []
    for other in observed[1:]:
        label, steps = other.spec.split_label, other.ran.grads.steps
        if len(steps) != len(first.ran.grads.steps):
            check.fail(f"{label}: {len(steps)} optimizer steps, {first.spec.split_label}: {len(first.ran.grads.steps)}")
            continue
        for k, (a, b) in enumerate(zip(first.ran.grads.steps, steps)):
            gap = (a.grad - b.grad).abs().max().item()
            gaps.append((f"{label} step {k + 1}", gap / max(a.grad.abs().max().item(), 1e-30)))
    largest_gap(check, gaps, run.dtype)
    return check.finish()


def applied_gap(step, max_grad_norm: float | None) -> float:
    """How far the step's .grad is from what it should apply: its micro-batches' gradients, clipped when asked.

    Unclipped: the relative gap to their sum. Clipped (by global norm, as torch's clip_grad_norm_): the
    part no rescaling explains, plus how far the rescaling is from max_grad_norm / |sum| (capped at 1).
    """
    if max_grad_norm is None:
        return step.unexplained
    want = min(1.0, max_grad_norm / (step.raw_norm + 1e-6))
    return max(step.residual, abs(step.coefficient - want) / want)


def running_counter(grads, per_minibatch: int, accumulation: int) -> str:
    """The class-15 diagnosis, or '': steps fall off the minibatch boundaries, each after a multiple of
    `accumulation` micro-batches counted across the whole run (a counter never reset at a minibatch's end)."""
    after = [max(step.backward_ids) + 1 if step.backward_ids else 0 for step in grads.steps]  # 1-based
    if not after or per_minibatch < 1 or all(a % per_minibatch == 0 for a in after):
        return ""
    if accumulation < 1 or any(a == 0 or a % accumulation for a in after):
        return ""
    listed = ", ".join(str(a) for a in after[:-1]) + (" and " if len(after) > 1 else "") + str(after[-1])
    return (
        f"steps after micro-batches {listed} (counted across the run), not at the ends of minibatches of "
        f"{per_minibatch}: an accumulation counter running across minibatches (class 15)"
    )


def every_microbatch_applied(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Every micro-batch's backward reaches an optimizer step in its own update; no step mixes updates;
    each step applies exactly its micro-batches' gradients (clipped to max_grad_norm when that is set)."""
    check = Check(case.id)
    obs = cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=case.param("epochs", 2)))
    view = require_view(obs, check)  # also: the trainer did not raise, and ran the expected micro-batches
    if view is None:
        return check.finish()
    grads, spec = obs.ran.grads, obs.spec
    per_update = len(spec.expected_rows())
    for u in range(spec.total_updates):
        n_back = sum(1 for c in grads.backwards if view.update_at(c) == u)
        n_steps = sum(1 for s in grads.steps if view.update_at(s.clock) == u)
        if n_back != per_update or n_steps != spec.steps_per_update:
            check.fail(f"update {u + 1}: {n_back} backward passes and {n_steps} optimizer steps, "
                       f"expected {per_update} and {spec.steps_per_update}")  # fmt: skip
    tol = tolerance("gradient", spec.dtype)
    for k, step in enumerate(grads.steps):
        owners = {view.update_at(grads.backwards[i]) for i in step.backward_ids}
        if owners != {view.update_at(step.clock)}:
            check.fail(f"step {k + 1} (update {view.update_at(step.clock) + 1}) applied backward passes of updates "
                       f"{sorted(o + 1 for o in owners)}")  # fmt: skip
        limit = None if spec.max_grad_norm is None else spec.max_grad_norm * (1 + tol.rel_tol) + tol.abs_tol
        if limit is not None and step.applied_norm > limit:
            check.fail(f"step {k + 1}: applied gradient norm {step.applied_norm:.6g} exceeds max_grad_norm "
                       f"{spec.max_grad_norm}")  # fmt: skip
    if grads.unapplied:
        check.fail(f"{len(grads.unapplied)} backward pass(es) never reached an optimizer step")
    counter = running_counter(grads, Geometry.of(spec).per_pass, spec.gradient_accumulation_steps)
    if counter:
        check.note(counter)
    gaps = [(f"step {k + 1}", applied_gap(step, spec.max_grad_norm)) for k, step in enumerate(grads.steps)]
    largest_gap(check, gaps, spec.dtype)
    return check.finish()


def all_masked(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Micro-batches with no response token add nothing: no NaN, no zero pulling a mean down."""
    check, obs = Check(case.id), cache.get(spec_for(ALL_MASKED, run))
    update = oracle_update(obs, 0, check)
    if update is not None and require(check, update.empty_micro_batches(), "no all-masked micro-batch was seen"):
        compare_pooled(obs, update, check)
    return check.finish()


def empty_update(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Every response of the update is empty: the response means are 0 (no NaN), the value means still pool."""
    check, obs = Check(case.id), cache.get(spec_for(EMPTY_UPDATE, run))
    update = oracle_update(obs, 0, check)
    only_empty = update is not None and len(update.empty_micro_batches()) == len(update.micro_batches)
    if update is not None and require(check, only_empty, "some response was not empty"):
        compare_pooled(obs, update, check)
    return check.finish()


def partition(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At LR 0, the same rollout cut into different splits (and epochs) logs the same seven pooled means."""
    base = spec_for(LR0, run).with_(name="partition_invariance")
    return partition_invariance(cache, base, case.id, POOLED_NAMES, RATIO_VAR)


SWEPT = {
    "uneven_split": uneven_split,
    "rollout_objectives": rollout_objectives,
    "gradient_partition": gradient_partition,
    "every_microbatch_applied": every_microbatch_applied,
    "training_signal": training_signal,
}
"""The checks run again under each settings profile, with their default parameters."""


def settings_sweep(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """One check of SWEPT under one profile of PROFILES (temperature 0.7, k3, reward whitening + EOS penalty,
    clipping): a correct trainer passes them all; one that drops the temperature from its entropy, gets k3
    wrong, applies the EOS penalty twice, whitens rewards wrongly or clips wrongly does not."""
    return SWEPT[case.param("check")](cache, run.with_(**PROFILES[case.param("settings")]), case)


SCENARIOS = (
    Scenario(
        "uneven_split", uneven_split, (("epochs", (1, 2)),), "4,3,2 (micro-batches 4+2), LR 1e-3: pooled == oracle"
    ),
    Scenario("lr0_ratio", lr0_ratio, (("epochs", (1, 2)),), "the uneven split at LR 0: the LR-0 identities"),
    Scenario("even_split", even_split, (), "6,2,2 (two micro-batches): pooled == oracle"),
    Scenario("freshness", freshness, (), "update 2's metrics == an oracle fed only update 2's records"),
    Scenario(
        "rollout_objectives",
        rollout_objectives,
        (("rollout", tuple(ROLLOUTS)),),
        "objective/* are per-sample sums over R, means over real samples",
    ),  # fmt: skip
    Scenario("gradient_partition", gradient_partition, (), "LR 0: the step gradient does not depend on the cut"),
    Scenario(
        "every_microbatch_applied",
        every_microbatch_applied,
        (("epochs", (2,)),),
        "each backward reaches a step of its own update; .grad is exactly its micro-batches'",
    ),  # fmt: skip
    Scenario("all_masked", all_masked, (), "empty micro-batches add nothing: no NaN, no zero in the mean"),
    Scenario("empty_update", empty_update, (), "every response empty: response means 0, value means pooled"),
    Scenario("partition_invariance", partition, (), "LR 0: Hypothesis-drawn splits log the same pooled means"),
    Scenario(
        "training_signal",
        training_signal,
        (("epochs", (1, 2)),),
        "raw advantages (and rewards) equal the oracle's GAE; per-token policy and value losses follow from them",
    ),  # fmt: skip
    Scenario(
        "settings_sweep",
        settings_sweep,
        (("settings", tuple(PROFILES)), ("check", tuple(SWEPT))),
        "the uneven split, its objectives, the gradient checks and the training signal under other settings",
    ),  # fmt: skip
)
