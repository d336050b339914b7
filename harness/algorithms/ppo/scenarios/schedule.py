"""The PPO data schedule: which rollout rows each minibatch of each epoch trained on, recomputed from the records.

docs/metrics.md, "The update": every epoch draws a fresh permutation of the rollout and cuts it into
`num_mini_batches` minibatches (TRL's PPOTrainer: `np.random.permutation` per epoch; the reference trainer:
`torch.randperm` per epoch), so every rollout row is trained on once per epoch, and two epochs group the rows into
minibatches independently. The view pairs each training micro-batch's rows with rollout rows (oracle/pairing.py);
consecutive micro-batches make up one minibatch (the spec's geometry, `expected_rows`, which `require_view` checks).

Every other check recomputes each micro-batch from its own records, whatever rows it holds, so a trainer that
reused the first epoch's permutation in every epoch (or trained one row twice and another never) passed them all.
"""

from __future__ import annotations

from harness.instrument.observe import ObservationCache
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult

from ..definitions import FIXED, MINIBATCH_PERMUTATION, PER_EPOCH
from ..runs import UNEVEN, spec_for
from ..spec import ScenarioSpec
from ..view import UpdateView
from .preconditions import require_view

Partition = frozenset[frozenset[int]]


def epoch_partitions(update: UpdateView, spec: ScenarioSpec, check: Check) -> list[Partition] | None:
    """Each epoch's minibatches as sets of rollout rows, or None after failing the check: rows not paired, or an
    epoch that does not train on every rollout row exactly once."""
    per_minibatch = -(-(spec.local_batch_size // spec.num_mini_batches) // spec.per_device_train_batch_size)
    per_epoch = per_minibatch * spec.num_mini_batches
    micro = update.micro_batches
    unpaired = [m.old_problem or "rows not paired" for m in micro if m.rollout_rows is None]
    if unpaired:
        check.fail(f"update {update.index + 1}: the rows each micro-batch trained on are unknown: {unpaired[0]}")
        return None
    partitions, ok = [], True
    for epoch in range(spec.num_ppo_epochs):
        batches = micro[epoch * per_epoch : (epoch + 1) * per_epoch]
        minibatches = [
            [int(r) for m in batches[k : k + per_minibatch] for r in m.rollout_rows.tolist()]
            for k in range(0, per_epoch, per_minibatch)
        ]
        rows = sorted(r for minibatch in minibatches for r in minibatch)
        if rows != list(range(spec.local_batch_size)):
            twice = sorted({r for r in rows if rows.count(r) > 1})
            never = sorted(set(range(spec.local_batch_size)) - set(rows))
            check.fail(f"update {update.index + 1} epoch {epoch + 1}: rollout rows trained more than once {twice}, "
                       f"never {never} (every row once per epoch)")  # fmt: skip
            ok = False
        partitions.append(frozenset(frozenset(minibatch) for minibatch in minibatches))
    return partitions if ok else None


def minibatch_schedule(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Every epoch of every update trains on each rollout row once, and the epochs' minibatch partitions are not
    the same in every update (a fresh permutation per epoch): the target's `minibatch_permutation` as TRL defines it,
    `per_epoch` (definitions.py). A target that declares `fixed` (verl's actor with `shuffle: false`) is held to the
    same minibatches in every epoch of every update instead.

    The run is the uneven split over two epochs (every_microbatch_applied's, logp_gradient's and optimizer_step's
    run, so it costs no training): 12 rows cut into two minibatches of 6, two updates. A right trainer draws the
    same partition in both epochs of one update with probability 2 / C(12, 6) = 1/462 (the first minibatch equal
    to either of the other epoch's), in both updates with (1/462)^2, about 5e-6, so the check fails only when every
    update repeats its partition; the permutation reused in every epoch repeats it in every update.
    """
    check = Check(case.id)
    obs = cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=2))
    view = require_view(obs, check)  # also: the micro-batches have the geometry of the spec, epoch after epoch
    if view is None:
        return check.finish()
    spec = obs.spec
    found = [epoch_partitions(update, spec, check) for update in view.updates]
    if check.failed:
        return check.finish()
    repeated = [len(set(partitions)) == 1 for partitions in found if partitions is not None]
    declared = cache.target.definition(MINIBATCH_PERMUTATION, PER_EPOCH) if cache.target is not None else PER_EPOCH
    if declared == FIXED:
        moved = [k + 1 for k, same in enumerate(repeated) if not same]
        if moved:
            check.fail(f"the target declares {MINIBATCH_PERMUTATION}={FIXED!r} (the same minibatches every epoch), "
                       f"but the epochs of update(s) {moved} cut the rollout into other minibatches")  # fmt: skip
        return check.finish()
    if repeated and all(repeated):
        check.fail(f"every update's {spec.num_ppo_epochs} epochs cut the rollout into the same minibatches: the "
                   "permutation is not drawn afresh per epoch (a right trainer repeats a partition of 12 rows into "
                   "two minibatches of 6 with probability 1/462 per update)")  # fmt: skip
    return check.finish()


SCHEDULE_SCENARIOS = (
    Scenario(
        "minibatch_schedule",
        minibatch_schedule,
        (),
        "each epoch trains on every rollout row once; the epochs' minibatches are drawn afresh, not the same in every"
        " update",
    ),  # fmt: skip
)
