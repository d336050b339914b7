"""The named scenarios of the gate. Each returns a CheckResult; none can pass on what it did not see.

Every scenario first checks that it saw what it expected (the micro-batch row
counts, every metric present and finite, spy records where it needs them) and
fails otherwise. The specs are plain `ScenarioSpec`s, so any target runs them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import oracle
from .runner import Observation, ObservationCache
from .spec import ScenarioSpec
from .tolerances import close, tolerance

POOLED = tuple(name for name in oracle.POOLED if name != "val/ratio_var")
"""The seven pooled means (val/ratio_var is checked beside them, not in partition invariance)."""
OBJECTIVES = oracle.ROLLOUT

# The uneven split of the issue: micro-batches of 4 and 2 rows, a learning rate that moves the policy.
UNEVEN = ScenarioSpec(name="uneven_split", learning_rate=1e-3, total_updates=2)
EVEN = UNEVEN.with_(name="even_split", per_device_train_batch_size=6, gradient_accumulation_steps=2, total_updates=1)
LR0 = UNEVEN.with_(name="lr0_ratio", learning_rate=0.0, total_updates=1)
# Cuts of the same minibatches of 6 rows into micro-batches: 4+2, 2+2+2, 6, 3+3.
GRADIENT_CUTS = ((4, 3), (2, 6), (6, 2), (3, 4))
ALL_MASKED = UNEVEN.with_(
    name="all_masked",
    per_device_train_batch_size=1,
    gradient_accumulation_steps=12,
    pad_logit_bias=2.5,
    total_updates=1,
)
EMPTY_UPDATE = UNEVEN.with_(name="empty_update", pad_logit_bias=40.0, total_updates=1)
PADDING_ROWS = UNEVEN.with_(name="padding_rows", rollout_chunk=5, total_updates=1)


@dataclass
class CheckResult:
    """The verdict of one named check, with per-metric detail for the report."""

    id: str
    scenario: str
    status: str = "pass"
    message: str = ""
    metrics: list = field(default_factory=list)

    def fail(self, message: str) -> CheckResult:
        self.status = "fail"
        self.message = f"{self.message}; {message}" if self.message else message
        return self

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def failure_lines(self) -> list[str]:
        lines = [f"FAIL {self.scenario}: {self.message}"] if self.message else []
        for m in self.metrics:
            if m.failed:
                lines.append(oracle.failure_line(self.scenario, m))
        return lines

    def absorb(self, results: list) -> CheckResult:
        """Add per-metric results; any that did not pass fails the check."""
        self.metrics.extend(results)
        bad = [m.name for m in results if m.failed]
        if bad:
            self.fail(f"{len(bad)} metric(s) disagree: {', '.join(bad)}")
        unchecked = [m for m in results if not m.failed and m.status == "not_recomputable"]
        if unchecked:
            note = "; ".join(f"{m.name} not recomputable: {m.reason}" for m in unchecked)
            self.message = f"{self.message}; {note}" if self.message else note
        return self


def spec_for(base: ScenarioSpec, run: ScenarioSpec) -> ScenarioSpec:
    """`base` with the run-wide settings (seed, device, dtype) of `run`."""
    return base.with_(seed=run.seed, device=run.device, dtype=run.dtype)


def expected_rows(spec: ScenarioSpec) -> list[int]:
    """Micro-batch row counts of one update, e.g. [4, 2, 4, 2] for 4, 3, 2 and one epoch."""
    mini = spec.local_batch_size // spec.num_mini_batches
    step = spec.per_device_train_batch_size
    one_minibatch = [min(step, mini - start) for start in range(0, mini, step)]
    return one_minibatch * spec.num_mini_batches * spec.num_ppo_epochs


def crashed(obs: Observation, result: CheckResult) -> bool:
    """Fail `result` when the trainer raised during this run."""
    if obs.error:
        result.fail(f"the trainer raised during the run ({split_label(obs.spec)}): {obs.error}")
    return bool(obs.error)


def logs_present(obs: Observation, names, result: CheckResult) -> bool:
    """Every update logged every name as a finite number; otherwise the check fails."""
    if crashed(obs, result):
        return False
    if len(obs.logs) != obs.spec.total_updates:
        result.fail(f"expected {obs.spec.total_updates} logged update(s), saw {len(obs.logs)}")
        return False
    where = f" ({split_label(obs.spec)})"
    for i, logs in enumerate(obs.logs):
        missing = [n for n in names if n not in logs]
        bad = [f"{n}={logs[n]}" for n in names if n in logs and not math.isfinite(float(logs[n]))]
        if missing:
            result.fail(f"update {i + 1}{where}: the trainer never logged {', '.join(missing)}")
        if bad:
            result.fail(f"update {i + 1}{where}: non-finite logged values {', '.join(bad)}")
        if missing or bad:
            return False
    return True


def updates_seen(obs: Observation, result: CheckResult) -> list | None:
    """The oracle's per-update view of the spy records, after checking the geometry it saw."""
    if crashed(obs, result):
        return None
    if not obs.records:
        result.fail("the spy recorded no calls")
        return None
    if "updates" not in obs.extra:  # several checks read one run: split its records once
        obs.extra["updates"] = oracle.split_updates(obs.records)
    updates = obs.extra["updates"]
    if len(updates) != obs.spec.total_updates:
        result.fail(f"spy saw {len(updates)} update(s), expected {obs.spec.total_updates}")
        return None
    want = expected_rows(obs.spec)
    for i, update in enumerate(updates):
        rows = oracle.observed_geometry(update)
        if rows != want:
            result.fail(f"update {i + 1}: micro-batch rows {rows}, expected {want}")
            return None
    return updates


def pooled_against_oracle(
    obs: Observation, index: int, result: CheckResult, names=POOLED + ("val/ratio_var",), needs=None
) -> CheckResult:
    """Compare update `index`'s pooled metrics with the oracle fed that update's records alone.

    `needs(update)` returns why the run did not test what the scenario is for (None when it did).
    """
    updates = updates_seen(obs, result)
    if updates is None or not logs_present(obs, names, result):
        return result
    update = updates[index]
    missing = needs(update) if needs is not None else None
    if missing:
        return result.fail(f"{missing}: the scenario did not test what it should")
    for problem in oracle.check_masks(update, obs.stop_token_id, obs.pad_token_id):
        result.fail(f"update {index + 1}: {problem}")
    expected = oracle.expected_metrics(
        update, obs.stop_token_id, obs.pad_token_id, obs.spec.kl_coef, obs.spec.kl_estimator
    )
    logged = {n: obs.logs[index][n] for n in names}
    return result.absorb(oracle.compare(logged, {n: expected[n] for n in names}, obs.spec.dtype))


def uneven_split(cache: ObservationCache, run: ScenarioSpec, epochs: int) -> CheckResult:
    """Pooled metrics of the 4+2 split (real padding, non-zero learning rate) equal the oracle's."""
    obs = cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=epochs))
    result = CheckResult(f"uneven_split[epochs={epochs}]", "uneven_split")

    def padding(update) -> str | None:
        return None if oracle.padded_rows(update, obs.stop_token_id, obs.pad_token_id) else "no response was padded"

    return pooled_against_oracle(obs, 0, result, needs=padding)


def even_split(cache: ObservationCache, run: ScenarioSpec) -> CheckResult:
    """Two micro-batches of 6 rows per update (the smallest val/ratio_var), non-zero LR: pooled equals the oracle."""
    obs = cache.get(spec_for(EVEN, run))
    return pooled_against_oracle(obs, 0, CheckResult("even_split", "even_split"))


def freshness(cache: ObservationCache, run: ScenarioSpec) -> CheckResult:
    """The second update's metrics equal an oracle fed only the second update's records."""
    obs = cache.get(spec_for(UNEVEN, run))
    result = CheckResult("freshness", "freshness")
    return pooled_against_oracle(obs, 1, result)


def rollout_objectives(cache: ObservationCache, run: ScenarioSpec, base: ScenarioSpec = UNEVEN) -> CheckResult:
    """`objective/*` of every update against the oracle (sums over R only, means over samples)."""
    obs = cache.get(spec_for(base, run))
    result = CheckResult(f"rollout_objectives[{base.name}]", "rollout_objectives")
    updates = updates_seen(obs, result)
    if updates is None or not logs_present(obs, OBJECTIVES, result):
        return result
    scores = obs.scores if obs.scores and len(obs.scores) == len(updates) else [None] * len(updates)
    for i, update in enumerate(updates):
        expected = oracle.expected_metrics(
            update, obs.stop_token_id, obs.pad_token_id, obs.spec.kl_coef, obs.spec.kl_estimator, scores=scores[i]
        )
        suffix = f" @ update {i + 1}" if len(updates) > 1 else ""
        logged = {n + suffix: obs.logs[i][n] for n in OBJECTIVES}
        want = {n + suffix: expected[n] for n in OBJECTIVES}
        result.absorb(oracle.compare(logged, want, obs.spec.dtype))
    return result


def lr0_ratio(cache: ObservationCache, run: ScenarioSpec, epochs: int) -> CheckResult:
    """At learning rate 0: val/ratio == 1, val/ratio_var == 0, approxkl == 0, clipfrac == 0. No spy needed."""
    obs = cache.get(spec_for(LR0, run).with_(num_ppo_epochs=epochs), spy=False)
    result = CheckResult(f"lr0_ratio[epochs={epochs}]", "lr0_ratio")
    identities = {"val/ratio": 1.0, "val/ratio_var": 0.0, "policy/approxkl_avg": 0.0, "policy/clipfrac_avg": 0.0}
    if not logs_present(obs, identities, result):
        return result
    return result.absorb(oracle.compare(obs.logs[0], identities, obs.spec.dtype, kind="identity"))


def partition_invariance(cache: ObservationCache, specs: list[ScenarioSpec]) -> CheckResult:
    """At LR 0, the same rollout cut into different splits (and epochs) logs the same seven pooled means."""
    result = CheckResult("partition_invariance", "partition_invariance")
    sizes = {s.local_batch_size for s in specs}
    if len(specs) < 2 or len(sizes) != 1 or any(s.learning_rate != 0 for s in specs):
        return result.fail("needs two or more LR-0 splits of one local batch size")
    observed = [cache.get(s, spy=False) for s in specs]
    if not all(logs_present(o, POOLED, result) for o in observed):
        return result
    first = observed[0]
    for obs in observed:  # the LR-0 identity holds at every split, one micro-batch or many
        var = {f"val/ratio_var @ {split_label(obs.spec)}": obs.logs[0].get("val/ratio_var", math.nan)}
        result.absorb(oracle.compare(var, {name: 0.0 for name in var}, obs.spec.dtype, kind="identity"))
    for other in observed[1:]:
        label = split_label(other.spec)
        logged = {f"{n} @ {label}": other.logs[0][n] for n in POOLED}
        reference = {f"{n} @ {label}": first.logs[0][n] for n in POOLED}
        result.absorb(oracle.compare(logged, reference, other.spec.dtype, kind="partition"))
    if not result.passed:
        result.message += f" (reference split {split_label(first.spec)})"
    return result


def split_label(spec: ScenarioSpec) -> str:
    return (
        f"bs={spec.per_device_train_batch_size},gas={spec.gradient_accumulation_steps},"
        f"mb={spec.num_mini_batches},epochs={spec.num_ppo_epochs}"
    )


def gradient_partition(cache: ObservationCache, run: ScenarioSpec, cuts=GRADIENT_CUTS) -> CheckResult:
    """At LR 0, each optimizer step's gradient is the same however its minibatch is cut into micro-batches."""
    result = CheckResult("gradient_partition", "gradient_partition")
    base = spec_for(LR0, run).with_(name="gradient_partition")
    observed = [cache.get(base.with_(per_device_train_batch_size=b, gradient_accumulation_steps=g)) for b, g in cuts]
    first = observed[0]
    if any(crashed(o, result) for o in observed):
        return result
    if not first.steps:
        return result.fail("no optimizer step was seen")
    for other in observed[1:]:
        label = split_label(other.spec)
        if len(other.steps) != len(first.steps):
            result.fail(f"{label}: {len(other.steps)} optimizer steps, {split_label(first.spec)}: {len(first.steps)}")
            continue
        for k, (a, b) in enumerate(zip(first.steps, other.steps)):
            gap = (a.grad - b.grad).abs().max().item()
            scale = max(a.grad.abs().max().item(), 1e-30)
            tol = tolerance("gradient", run.dtype)
            if not close(gap / scale, 0.0, tol):
                result.fail(f"{label}: step {k + 1} gradient differs by {gap:.3g} (relative {gap / scale:.3g})")
    return result


def every_microbatch_applied(cache: ObservationCache, run: ScenarioSpec, epochs: int = 2) -> CheckResult:
    """Every micro-batch's backward reaches an optimizer step in its own update; no step mixes updates."""
    obs = cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=epochs))
    result = CheckResult(f"every_microbatch_applied[epochs={epochs}]", "every_microbatch_applied")
    updates = updates_seen(obs, result)  # also: the trainer did not raise, and ran the expected micro-batches
    if updates is None:
        return result
    starts = oracle.update_starts(obs.records, updates=updates)

    def update_of(clock: int) -> int:
        # `clock` counts the records made before the event: an event at the position where
        # an update's first record lands happened before that update began
        return sum(1 for start in starts[1:] if start < clock)

    per_update = len(expected_rows(obs.spec))
    steps_per_update = obs.spec.num_mini_batches * obs.spec.num_ppo_epochs
    for u in range(obs.spec.total_updates):
        n_back = sum(1 for c in obs.backwards if update_of(c) == u)
        n_steps = sum(1 for s in obs.steps if update_of(s.clock) == u)
        if n_back != per_update or n_steps != steps_per_update:
            result.fail(
                f"update {u + 1}: {n_back} backward passes and {n_steps} optimizer steps, "
                f"expected {per_update} and {steps_per_update}"
            )
    for k, step in enumerate(obs.steps):
        owners = {update_of(obs.backwards[i]) for i in step.backward_ids}
        if owners != {update_of(step.clock)}:
            result.fail(
                f"step {k + 1} (update {update_of(step.clock) + 1}) applied backward passes of updates "
                f"{sorted(o + 1 for o in owners)}"
            )
        if not close(step.unexplained, 0.0, tolerance("gradient", obs.spec.dtype)):
            result.fail(
                f"step {k + 1}: .grad differs from its micro-batches' gradients (relative {step.unexplained:.3g})"
            )
    if obs.unapplied:
        result.fail(f"{len(obs.unapplied)} backward pass(es) never reached an optimizer step")
    return result


def all_masked(cache: ObservationCache, run: ScenarioSpec) -> CheckResult:
    """Micro-batches with no response token add nothing: no NaN, no zero pulling a mean down."""
    obs = cache.get(spec_for(ALL_MASKED, run))

    def an_empty_microbatch(update) -> str | None:
        empty = oracle.empty_microbatches(update, obs.stop_token_id, obs.pad_token_id)
        return None if empty else "no all-masked micro-batch was seen"

    return pooled_against_oracle(obs, 0, CheckResult("all_masked", "all_masked"), needs=an_empty_microbatch)


def empty_update(cache: ObservationCache, run: ScenarioSpec) -> CheckResult:
    """Every response of the update is empty: the response means are 0 (no NaN), the value means still pool."""
    obs = cache.get(spec_for(EMPTY_UPDATE, run))

    def only_empty_microbatches(update) -> str | None:
        empty = oracle.empty_microbatches(update, obs.stop_token_id, obs.pad_token_id)
        return None if len(empty) == len(update.micro_batches) else "some response was not empty"

    return pooled_against_oracle(obs, 0, CheckResult("empty_update", "empty_update"), needs=only_empty_microbatches)


def padding_rows(cache: ObservationCache, run: ScenarioSpec) -> CheckResult:
    """A rollout cut into chunks that do not divide the batch: per-sequence means over real samples only."""
    return rollout_objectives(cache, run, base=PADDING_ROWS)
