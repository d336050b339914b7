"""The PPO gate's scenarios. Each reads top-down: run, view, expect, compare; none passes on what it did not see.

Every scenario first checks that it saw what it expected (the micro-batch row counts, every
metric present and finite, spy records where it needs them, the padding or empty
micro-batches it exists for) and fails otherwise. The specs are plain `ScenarioSpec`s, so
any PPO target runs them. Check ids come from `Scenario.cases()`.
"""

from __future__ import annotations

from dataclasses import replace

from harness.checks.sampling import judge_sampling
from harness.compare import compare
from harness.instrument.observe import ObservationCache
from harness.require import require, usable
from harness.scenario import Case, Scenario
from harness.unlogged import declared_unlogged
from harness.verdict import Check, CheckResult, CheckStatus

from ..contract import LR0_IDENTITIES, POOLED_NAMES, POOLED_STATS, RATIO_VAR, ROLLOUT
from ..oracle import signal
from ..oracle.expect import expected_metrics
from ..oracle.scores import update_scores
from ..runs import ALL_MASKED, EMPTY_UPDATE, EVEN, GRADIENT_CUTS, LR0, ROLLOUTS, UNEVEN, spec_for
from ..spec import ScenarioSpec
from ..tolerances import TOLERANCES
from ..wrong.poolings import diagnose_identities
from ..wrong.rollout_poolings import diagnose_rollout
from .forward import forward_recompute
from .gradients import (
    every_microbatch_applied,
    gradient_partition,
    logp_gradient,
)
from .hyperparameters import clip_tokens, untold
from .partitions import partition_invariance
from .preconditions import compare_pooled, oracle_update, require_logs, require_view

PROFILES = {
    "temperature": {"temperature": 0.7},
    "k3": {"kl_estimator": "k3"},
    "whiten_eos": {"whiten_rewards": True, "missing_eos_penalty": 1.0},
    "clipped": {"max_grad_norm": 1.0},
    "dropout": {"dropout": 0.1},
    "reward_model": {"reward": "model"},
    "reward_text": {"reward": "text", "prompt_pads": 3},
    "hyperparameters": {"gamma": 0.9, "lam": 0.8, "kl_coef": 0.1, "cliprange": 0.1, "cliprange_value": 0.3},
}
"""The settings sweep: each profile changes the run-wide settings of its checks in SWEEP. The reward on text runs on
prompts left-padded by 0 to 3 pads, so that its prompts, decoded, must lose their pad tokens too.

The hyperparameters profile moves every setting GAE, the KL penalty and the two clipped losses read off the default
that every other run keeps: gamma 0.9, lam 0.8, kl_coef 0.1, cliprange 0.1 and cliprange_value 0.3. The clip ranges
are chosen so that tokens fall between the profile's bound and the default's (measured on the reference's two-epoch
uneven split at seeds 0-4: 39 to 59 response tokens change their clip indicator between cliprange 0.1 and 0.2, and
23 to 31 value tokens between cliprange_value 0.3 and 0.2; at cliprange 0.15 and one epoch, seed 0 had 2)."""
PROFILE_ROWS = {"whiten_eos": 2}
"""Profiles whose runs take more rows: every run of the profile's checks has this many times the rows per micro-batch
(`per_device_train_batch_size`), so per minibatch and per rollout, and nothing else changed. A check must not fail a
trainer for its documented preconditions: with `whiten_rewards`, TRL's PPOTrainer asserts per-rank minibatches of at
least WHITEN_MIN_ROWS rows (`local_mini_batch_size >= 8`), and the checks' minibatches have 6. Twice the rows keep
every cut and its accumulation steps: the uneven split is 8+4 in minibatches of 12 (gradient_accumulation_steps 3,
two minibatches, a rollout of 24 rows whitened together: the 48 prompts over its two updates), the gradient cuts 8+4,
4+4+4, 12 and 6+6."""
WHITEN_MIN_ROWS = 8
"""TRL's smallest per-rank minibatch with reward whitening (trl/experimental/ppo/ppo_trainer.py, 1.12.0)."""
assert all(b * g * PROFILE_ROWS["whiten_eos"] // UNEVEN.num_mini_batches >= WHITEN_MIN_ROWS
           for b, g in ((UNEVEN.per_device_train_batch_size, UNEVEN.gradient_accumulation_steps), *GRADIENT_CUTS)
           ), "the whitening profile's minibatches meet TRL's minimum"  # fmt: skip


PROFILE_EPOCHS = {"hyperparameters": 2}
"""Profiles whose runs all take this many epochs: the hyperparameters profile's checks then read one run (the uneven
split over two epochs, logp_gradient's), where the second epoch's ratios are off 1 far more than in one epoch's second
minibatch: at cliprange 0.1, reference seed 0, 39 tokens change their clip indicator at 0.2 over two epochs, 4 in
one."""


class _Epochs:
    """An ObservationCache whose every run has `epochs` epochs."""

    def __init__(self, cache: ObservationCache, epochs: int) -> None:
        self._cache, self._epochs = cache, epochs
        self.target = getattr(cache, "target", None)  # its declarations (harness/unlogged.py)

    def get(self, spec: ScenarioSpec, spy: bool = True):
        return self._cache.get(spec.with_(num_ppo_epochs=self._epochs), spy=spy)


class _MoreRows:
    """An ObservationCache whose every run has `factor` times the rows per micro-batch of the spec asked for."""

    def __init__(self, cache: ObservationCache, factor: int) -> None:
        self._cache, self._factor = cache, factor
        self.target = getattr(cache, "target", None)

    def get(self, spec: ScenarioSpec, spy: bool = True):
        rows = spec.per_device_train_batch_size * self._factor
        return self._cache.get(spec.with_(per_device_train_batch_size=rows), spy=spy)


def uneven_split(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Pooled metrics of the 4+2 split (real padding, non-zero learning rate) equal the oracle's."""
    check, obs = Check(case.id), cache.get(spec_for(UNEVEN, run).with_(num_ppo_epochs=case.param("epochs", 1)))
    update = oracle_update(obs, 0, check, unlogged=declared_unlogged(cache))
    if update is not None and require(check, update.padded_rows(), "no response was padded"):
        compare_pooled(obs, update, check)
    return check.finish()


def even_split(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Two micro-batches of 6 rows per update (the smallest val/ratio_var), non-zero LR: pooled equals the oracle."""
    check, obs = Check(case.id), cache.get(spec_for(EVEN, run))
    update = oracle_update(obs, 0, check, unlogged=declared_unlogged(cache))
    if update is not None:
        compare_pooled(obs, update, check)
    return check.finish()


def freshness(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """The second update's metrics equal an oracle fed only the second update's records."""
    check, obs = Check(case.id), cache.get(spec_for(UNEVEN, run))
    view = require_view(obs, check)
    if view is not None and require_logs(obs, POOLED_STATS, check, declared_unlogged(cache)):
        compare_pooled(obs, view.updates[1], check, earlier=view.updates[0])
    return check.finish()


def rollout_objectives(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """`objective/*` of every update against the oracle (sums over R only, means over real samples)."""
    check, obs = Check(case.id), cache.get(spec_for(ROLLOUTS[case.param("rollout", "uneven_split")], run))
    view = require_view(obs, check)
    if view is None or not require_logs(obs, ROLLOUT, check, declared_unlogged(cache)):
        return check.finish()
    scores = update_scores(obs.ran, view.updates)
    for i, update in enumerate(view.updates):
        spec = obs.spec
        expected = expected_metrics(update, spec.kl_coef, spec.kl_estimator, scores[i], spec.missing_eos_penalty)
        where = f"update {i + 1}" if len(view.updates) > 1 else None
        logged, names = obs.ran.logs[i], usable(obs.ran.logs[i], ROLLOUT)  # require_logs named the others
        verdicts = compare(
            {n: logged[n] for n in names}, {n: expected[n] for n in names}, spec.dtype, TOLERANCES, where=where
        )
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
    scores = update_scores(obs.ran, view.updates)
    for update, score in zip(view.updates, scores):
        logged, expected = signal.expectations(update, obs.spec, score)
        where = f"update {update.index + 1}"
        check.absorb(compare(logged, expected, obs.spec.dtype, TOLERANCES, kind="formula", where=where))
    return check.finish()


def lr0_ratio(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At learning rate 0: val/ratio == 1, val/ratio_var == 0, approxkl == 0, clipfrac == 0. No spy needed."""
    check = Check(case.id)
    obs = cache.get(spec_for(LR0, run).with_(num_ppo_epochs=case.param("epochs", 1)), spy=False)
    if require_logs(obs, LR0_IDENTITIES, check, declared_unlogged(cache)):
        identities = {n: LR0_IDENTITIES[n] for n in usable(obs.ran.logs[0], list(LR0_IDENTITIES))}
        verdicts = compare(obs.ran.logs[0], identities, obs.spec.dtype, TOLERANCES, kind="identity")
        check.absorb(diagnose_identities(verdicts, obs.spec))
    return check.finish()


def all_masked(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Micro-batches with no response token add nothing: no NaN, no zero pulling a mean down."""
    check, obs = Check(case.id), cache.get(spec_for(ALL_MASKED, run))
    update = oracle_update(obs, 0, check, unlogged=declared_unlogged(cache))
    if update is not None and require(check, update.empty_micro_batches(), "no all-masked micro-batch was seen"):
        compare_pooled(obs, update, check)
    return check.finish()


def empty_update(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """Every response of the update is empty: the response means are 0 (no NaN), the value means still pool."""
    check, obs = Check(case.id), cache.get(spec_for(EMPTY_UPDATE, run))
    update = oracle_update(obs, 0, check, unlogged=declared_unlogged(cache))
    only_empty = update is not None and len(update.empty_micro_batches()) == len(update.micro_batches)
    if update is not None and require(check, only_empty, "some response was not empty"):
        compare_pooled(obs, update, check)
    return check.finish()


def sampling(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """The rollout's tokens are draws from softmax(logits / temperature) of its own log-probs (the uneven split's
    two updates), at the run's temperature and at 0.5 (where log-probs taken without the temperature show)."""
    temperature = run.temperature if case.param("temperature") == "run" else float(case.param("temperature"))
    check, obs = Check(case.id), cache.get(spec_for(UNEVEN, run).with_(temperature=temperature))
    view = require_view(obs, check)
    if view is not None:
        problems = [u.rollout_problem for u in view.updates if u.rollout is None]
        for problem in problems:
            check.fail(problem or "an update has no rollout records")
        if not problems:
            rollouts = [u.rollout for u in view.updates]
            judge_sampling(rollouts, obs.ran.stop_token_id, obs.ran.pad_token_id, check, obs.spec.split_label)
    return check.finish()


def partition(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At LR 0, the same rollout cut into different splits (and epochs) logs the same seven pooled means (those the
    target declares its trainer does not log left out, harness/unlogged.py)."""
    base = spec_for(LR0, run).with_(name="partition_invariance")
    return partition_invariance(cache, base, case.id, POOLED_NAMES, RATIO_VAR, declared_unlogged(cache))


SWEPT = {
    "uneven_split": uneven_split,
    "rollout_objectives": rollout_objectives,
    "gradient_partition": gradient_partition,
    "every_microbatch_applied": every_microbatch_applied,
    "training_signal": training_signal,
    "forward_recompute": forward_recompute,
    "lr0_ratio": lr0_ratio,
    "logp_gradient": logp_gradient,
}
"""The checks run again under a settings profile, with their default parameters."""
UPDATE_CHECKS = (
    "uneven_split",
    "rollout_objectives",
    "gradient_partition",
    "every_microbatch_applied",
    "training_signal",
    "forward_recompute",
)
SWEEP = {
    **{profile: UPDATE_CHECKS for profile in ("temperature", "k3", "whiten_eos", "clipped")},
    "dropout": ("lr0_ratio", "gradient_partition"),
    "reward_model": ("rollout_objectives", "training_signal"),
    "reward_text": ("rollout_objectives", "training_signal"),
    "hyperparameters": ("rollout_objectives", "training_signal", "logp_gradient"),
}
"""Each profile's checks. Dropout that acts makes the update's forward differ from the rollout's, so only
the checks that compare the two at LR 0 see it; the others recompute from what the update itself computed.
A reward model's scores, and a reward on text's, are read by the rollout objectives and the training signal only."""


def settings_sweep(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """One check of SWEEP under one profile of PROFILES (temperature 0.7, k3, reward whitening + EOS penalty,
    clipping, dropout 0.1 in every model, a reward model, a reward on decoded text): a correct trainer passes them
    all; one that drops the temperature from its entropy, gets k3 wrong, applies the EOS penalty twice, whitens
    rewards wrongly, clips wrongly, lets dropout act in the update, reads its reward model's head at the wrong
    position, hands its reward on text other strings than the decoded prompt and truncated response, or reads gamma,
    lam, kl_coef, cliprange or cliprange_value from a constant (their defaults) does not. The whitening profile's runs
    have twice the rows per micro-batch (PROFILE_ROWS: TRL's whitening minimum); the hyperparameters profile's runs
    two epochs (PROFILE_EPOCHS), and each of its checks fails where its run holds no number that a setting it reads
    at the default instead would change (TOLD: a run that shows nothing must not pass)."""
    profile, name = case.param("settings"), case.param("check")
    if profile in PROFILE_ROWS:
        cache = _MoreRows(cache, PROFILE_ROWS[profile])
    if profile in PROFILE_EPOCHS:
        cache = _Epochs(cache, PROFILE_EPOCHS[profile])
    run = run.with_(**PROFILES[profile])
    result = SWEPT[name](cache, run, case)
    if profile in TOLD:
        result = _told(result, cache, run, case)
    return result


TOLD = {"hyperparameters"}
"""The profiles whose every check must show that the settings it reads changed a number it compared
(hyperparameters.py): one that hard-codes a default is exact on a run where nothing tells them apart."""
TOLD_READS = {
    "rollout_objectives": ("kl_coef",),
    "training_signal": ("gamma", "lam", "kl_coef", "cliprange", "cliprange_value"),
    "logp_gradient": ("gamma", "lam", "kl_coef", "cliprange", "cliprange_value"),
}
"""The settings each check of a TOLD profile reads; each reads the uneven split's run (its epochs the profile's)."""


def _told(result: CheckResult, cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """`result`, failed where the run the check read holds no number that its settings change (`untold`)."""
    name = case.param("check")
    settings = TOLD_READS[name]
    check, obs = Check(case.id), cache.get(spec_for(UNEVEN, run))
    view = require_view(obs, check)
    if view is None:
        return result  # the check itself failed on the same run, for the same reason
    scores = update_scores(obs.ran, view.updates)
    missing = untold(view, obs.spec, scores, settings, objectives=name == "rollout_objectives")
    problems = [f"{p}: the scenario did not test what it should" for p in missing]
    tokens = clip_tokens(view, obs.spec, scores) if {"cliprange", "cliprange_value"} & set(settings) else {}
    notes = [f"{n} tokens change their clip indicator at the default {s}" for s, n in tokens.items()]
    status = CheckStatus.FAIL if problems else result.status
    return replace(result, status=status, problems=result.problems + tuple(problems), notes=result.notes + tuple(notes))


POOLED_SCENARIOS = (
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
        "sampling",
        sampling,
        (("temperature", ("run", "0.5")),),
        "the rollout's tokens are draws from its own softmax(logits / T): |sum(-log p - H)| / sqrt(sum Var) <= 5",
    ),  # fmt: skip
    Scenario(
        "settings_sweep",
        settings_sweep,
        (),
        "the uneven split, its objectives, the gradient checks, the training signal and the forward recompute under"
        " other settings; with dropout, the LR-0 checks; with a reward model, the"
        " checks that read scores; with gamma, lam, kl_coef and the clip ranges off their defaults, the checks that"
        " read them",
        tuple((("settings", s), ("check", c)) for s, checks in SWEEP.items() for c in checks),
    ),  # fmt: skip
)
