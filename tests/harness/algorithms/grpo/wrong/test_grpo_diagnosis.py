"""GRPO diagnoses: a failing check names the known wrong formula that reproduces its numbers, and only then.

Each broken trainer is the reference GRPO trainer with one of the catalogue's patches
(mutants/catalogue/entries) applied to a copy of its module, or the reference's own records with
one thing changed; the reference itself passes with no diagnosis, and a change no known formula
reproduces fails with none.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from pathlib import Path

import pytest
import torch

import reference_trainers
import reference_trainers.grpo  # noqa: F401 (the attribute `patched` replaces, then restores, must be there first)
from harness.algorithms import case
from harness.algorithms.grpo.instruments import recorded
from harness.algorithms.grpo.oracle.rewards import nan_mean, nan_std
from harness.algorithms.grpo.scenarios import gradients as gradient_scenarios
from harness.algorithms.grpo.scenarios import pooled as scenarios
from harness.algorithms.grpo.scenarios.rewards import REWARDS
from harness.algorithms.grpo.spec import GRPOSpec
from harness.instrument.observe import ObservationCache
from harness.report import Report
from harness.report.terminal import render_terminal
from mutants.catalogue.patches import apply_to_text, read_diff
from tests.support.grpo_doubles import FixedCache
from tests.support.grpo_doubles import altered as changed

ROOT = Path(__file__).resolve().parents[5]
ENTRIES = ROOT / "mutants" / "catalogue" / "entries"
TRAINER = ROOT / "reference_trainers" / "grpo.py"


def run_check(check_id, cache):
    return case(check_id, "grpo").run(cache, GRPOSpec())


@functools.cache
def patched(mutant: str, *check_ids: str) -> tuple[dict, ObservationCache]:
    """(the results of `check_ids`, the cache of their runs) on the reference trainer with catalogue patch `mutant`
    applied to a copy of its module. A run asked of the cache afterwards, outside the patch, crashes."""
    from harness.algorithms.grpo.targets.reference import factory

    source = apply_to_text(TRAINER.read_text(), list(read_diff((ENTRIES / f"{mutant}.diff").read_text())), mutant)
    module = types.ModuleType("reference_trainers.grpo")
    module.__file__, module.__package__ = str(TRAINER), "reference_trainers"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "reference_trainers.grpo", module)
        exec(compile(source, str(TRAINER), "exec"), module.__dict__)
        patch.setattr(reference_trainers, "grpo", module)
        cache = ObservationCache(factory)
        results = {check_id: run_check(check_id, cache) for check_id in check_ids}
    cache.factory = lambda spec: (_ for _ in ()).throw(AssertionError("run outside the patch"))
    return results, cache


def broken(mutant: str, *check_ids: str) -> dict:
    """The results of `check_ids` on the reference trainer with catalogue patch `mutant`."""
    return patched(mutant, *check_ids)[0]


@pytest.fixture(scope="module")
def reference_cache():
    from harness.algorithms.grpo.targets.reference import factory

    return ObservationCache(factory)


def diagnosed(result):
    """The failing metrics' diagnoses (None where there is none)."""
    return [m.diagnosis for m in result.metrics if m.failed]


def classes(result):
    return {d.classes for d in diagnosed(result) if d is not None}


def terminal(result) -> str:
    """The check's one terminal line."""
    report = Report("reference-grpo", "cpu", algorithm="grpo", dtype="float32", torch="2.13.0", seed=0)
    report.add(result)
    return render_terminal(report).splitlines()[1]


def altered(obs, **changes):
    return FixedCache.of(changed(obs, **changes))


def with_advantages(obs, change):
    """The reference's records with every row's advantage replaced by `change(generation, completion, value)`."""
    records = []
    for r in recorded(obs.ran).loss_inputs:
        values = [change(int(r.generation), int(i), float(a)) for i, a in zip(r.completions, r.advantages)]
        records.append(dataclasses.replace(r, advantages=torch.tensor(values, dtype=r.advantages.dtype)))
    return altered(obs, loss_inputs=tuple(records))


# ---------------------------------------------------------------- the reference: no diagnosis


def test_the_reference_passes_every_diagnosed_check_with_no_diagnosis(reference_cache):
    for check_id in ("advantages[scale_rewards=group]", "advantages[scale_rewards=batch]",
                     "reward_stats[scale_rewards=group]", "logp_gradient[loss_type=grpo]",
                     "uneven_lengths[loss_type=grpo]", "completion_lengths"):  # fmt: skip
        result = run_check(check_id, reference_cache)
        assert result.passed and not any(m.diagnosis for m in result.metrics), check_id
        assert " = " not in terminal(result), check_id


# ---------------------------------------------------------------- advantages and reward statistics


@pytest.mark.parametrize(
    ("mutant", "check_id", "named", "words"),
    [
        ("g48_population_std", "advantages[scale_rewards=group]", (48,), "population std"),
        ("g48_population_std", "advantages[scale_rewards=batch]", (48,), "population std"),
        ("g48_population_std", "reward_stats[scale_rewards=group]", (48,), "population std"),
        ("g49_batch_std_for_group", "advantages[scale_rewards=group]", (49,), "the generation batch's std"),
        ("g50_unscorable_reward_as_zero", "advantages[scale_rewards=group]", (50,), "rewarded 0"),
        ("g50_unscorable_reward_as_zero", "reward_stats[scale_rewards=group]", (50,), "rewarded 0"),
        ("g51_reward_weights_ignored", "advantages[scale_rewards=group]", (51,), "weights not applied"),
        ("g51_logged_reward_unweighted", "reward_stats[scale_rewards=group]", (50, 51), "a nansum of the scores"),
    ],
)
def test_a_wrong_advantage_or_reward_formula_is_named_on_the_terminal(mutant, check_id, named, words):
    result = broken(mutant, check_id)[check_id]
    assert not result.passed and classes(result) == {named}
    line = terminal(result)
    assert words in line and f"(class {' + '.join(map(str, named))})" in line


def test_the_advantages_check_counts_the_rows_off():
    result = broken("g48_population_std", "advantages[scale_rewards=group]")["advantages[scale_rewards=group]"]
    (metric,) = result.metrics
    assert "the worst of 15 of 32 rows off" in metric.where and "it gives all 32 logged advantages" in terminal(result)


def test_other_advantage_formulas_are_named_from_the_records(reference_cache):
    """No std scaling, the batch's mean and std, a common factor: the reference's rows with their advantages
    recomputed so (from the scores, independently of the formulas the diagnosis knows)."""
    obs = reference_cache.get(REWARDS.with_(scale_rewards="group"), spy=False)
    made = {}
    for generation in (0, 1):
        calls = [c for c in recorded(obs.ran).reward_calls if c.generation == generation]
        rewards = torch.stack([c.scores for c in calls], 1)
        weighted = (rewards * torch.tensor([1.0, -0.5], dtype=torch.float64)).nansum(1)
        made[generation] = weighted.masked_fill(rewards.isnan().all(1), float("nan"))
    groups = lambda g: made[g].view(-1, 4)  # noqa: E731
    centred = lambda g, i: float(made[g][i] - nan_mean(groups(g)[i // 4]))  # noqa: E731
    batch = lambda g, i: float((made[g][i] - nan_mean(made[g])) / (nan_std(made[g]) + 1e-4))  # noqa: E731
    clean = lambda value: 0.0 if value != value else value  # noqa: E731
    for change, words in ((lambda g, i, a: clean(centred(g, i)), "not divided by any std"),
                          (lambda g, i, a: clean(batch(g, i)), "normalised over the generation batch"),
                          (lambda g, i, a: 0.5 * a, "0.5 times the oracle's advantage in every row")):  # fmt: skip
        result = run_check("advantages[scale_rewards=group]", with_advantages(obs, change))
        assert not result.passed and words in terminal(result), words


def test_an_advantage_off_by_what_no_formula_gives_names_nothing(reference_cache):
    obs = reference_cache.get(REWARDS.with_(scale_rewards="group"), spy=False)
    result = run_check(
        "advantages[scale_rewards=group]", with_advantages(obs, lambda g, i, a: a + (0.3 if i == 5 else 0))
    )
    (metric,) = result.metrics
    assert not result.passed and metric.diagnosis is None and "no known wrong formula" in metric.diagnosis_reason
    assert " = " not in terminal(result)


def test_a_formula_is_named_only_while_it_reproduces_every_row():
    """The population std's logged advantages, one of them moved past the tolerance: no formula gives them all."""
    check_id = "advantages[scale_rewards=group]"
    results, cache = patched("g48_population_std", check_id)
    assert classes(results[check_id]) == {(48,)}
    obs = cache.get(REWARDS.with_(scale_rewards="group"), spy=False)
    assert obs.ran is not None and recorded(obs.ran).loss_inputs
    moved = run_check(check_id, with_advantages(obs, lambda g, i, a: a + (1e-3 if (g, i) == (1, 2) else 0.0)))
    assert not moved.passed and diagnosed(moved) == [None] and " = " not in terminal(moved)


# ---------------------------------------------------------------- the KL: logged, in the loss, in the gradient


@pytest.mark.parametrize(
    ("mutant", "check_id", "named"),
    [
        ("g41_kl_term_subtracted", "uneven_lengths[loss_type=grpo]", (41,)),
        ("g41_kl_term_subtracted", "logp_gradient[loss_type=grpo]", (41,)),
        ("g41_kl_term_subtracted", "logp_gradient[run=kl_uncorrected]", (41,)),
        ("g21_k3_wrong_way_round", "uneven_lengths[loss_type=grpo]", (21,)),
        ("g21_k3_wrong_way_round", "logp_gradient[loss_type=dapo]", (21,)),
    ],
)
def test_a_wrong_kl_term_is_named_on_the_terminal(mutant, check_id, named):
    result = broken(mutant, check_id)[check_id]
    assert not result.passed and named in classes(result)
    assert f"(class {named[0]})" in terminal(result)


def test_a_logged_kl_of_the_wrong_sign_is_named_and_a_wrong_one_is_not(reference_cache):
    obs = reference_cache.get(scenarios.spec_for(scenarios.UNEVEN, GRPOSpec()), spy=False)
    for change, named in ((lambda kl: -kl, True), (lambda kl: 0.9 * kl, False)):
        logs = [{**log, "kl": change(log["kl"])} for log in obs.ran.logs]
        result = run_check("uneven_lengths[loss_type=dapo]", altered(obs, logs=tuple(logs)))
        kl = [m for m in result.metrics if m.failed]
        assert not result.passed and {m.name for m in kl} == {"kl"}
        assert all((m.diagnosis is not None) == named for m in kl)
        assert ("the KL with its sign flipped" in terminal(result)) == named


# ---------------------------------------------------------------- the gradient in words


def gradient_obs(reference_cache, check_id="logp_gradient[loss_type=bnpo]"):
    return reference_cache.get(gradient_scenarios.run_spec(GRPOSpec(), case(check_id, "grpo")), spy=False)


def with_grad(obs, change):
    records = [dataclasses.replace(r, logp_grad=change(r.logp_grad.clone())) for r in recorded(obs.ran).loss_inputs]
    return altered(obs, loss_inputs=tuple(records))


def test_a_gradient_gap_says_in_words_what_it_compared(reference_cache):
    obs = gradient_obs(reference_cache)

    def one_token(grad, done=[]):  # noqa: B006 - the first record's token only
        if not done:
            grad[0, 2] += 3.0
            done.append(1)
        return grad

    result = run_check("logp_gradient[loss_type=bnpo]", with_grad(obs, one_token))
    line = terminal(result)
    assert not result.passed
    assert "dL/dlogp recorded at window 1, micro-batch 1, row 1, token 3 is " in line
    assert "where the formula gives" in line and "rel inf" not in line and "logged=" not in line
    (metric,) = [m for m in result.metrics if m.failed]
    assert metric.diagnosis is None and "no known wrong formula" in metric.diagnosis_reason


def test_a_common_factor_of_the_gradient_is_named_on_the_terminal(reference_cache):
    obs = gradient_obs(reference_cache)
    result = run_check("logp_gradient[loss_type=bnpo]", with_grad(obs, lambda g: 0.5 * g))
    assert "= the recorded dL/dlogp is 0.5 times the formula's at every token (a common factor)" in terminal(result)
    assert "0.5 times the formula's in every micro-batch (a common factor)" in result.message  # the note stays


def test_a_mean_of_micro_batch_means_of_the_gradient_is_named(reference_cache):
    """Each micro-batch's recorded gradient scaled by its window's tokens over its own (and by 0.7): a loss over
    each micro-batch's own tokens; the same scaling with one token moved names nothing."""
    obs = gradient_obs(reference_cache, "logp_gradient[loss_type=dapo]")
    windows = {}
    for r in recorded(obs.ran).loss_inputs:
        windows[int(r.window)] = windows.get(int(r.window), 0) + int(r.completion_mask.sum())
    share = lambda r: windows[int(r.window)] / max(int(r.completion_mask.sum()), 1)  # noqa: E731
    records = [dataclasses.replace(r, logp_grad=0.7 * r.logp_grad * share(r)) for r in recorded(obs.ran).loss_inputs]
    result = run_check("logp_gradient[loss_type=dapo]", altered(obs, loss_inputs=tuple(records)))
    assert not result.passed and "not its window's, times 0.7: a mean of micro-batch means" in terminal(result)
    records[0] = dataclasses.replace(records[0], logp_grad=records[0].logp_grad.clone())
    records[0].logp_grad[0, 0] += 1.0
    moved = run_check("logp_gradient[loss_type=dapo]", altered(obs, loss_inputs=tuple(records)))
    assert not moved.passed and diagnosed(moved) == [None]


@pytest.mark.parametrize("mutant, loss_type", [("g70_sapo_temperatures_hard_coded", "sapo"),
                                               ("g70_vespo_settings_hard_coded", "vespo")])  # fmt: skip
def test_a_loss_types_settings_read_at_their_defaults_are_named(mutant, loss_type):
    """sapo's temperatures or vespo's k and lambda taken from constants equal to TRL's defaults, in the off-policy
    run that sets others: the gradient is named class 70, by the formula with the defaults."""
    check_id = f"logp_gradient[run=off_policy,loss_type={loss_type}]"
    result = broken(mutant, check_id)[check_id]
    assert not result.passed and classes(result) == {(70,)}, result.message
    assert f"the formula with {loss_type}'s settings at their defaults" in terminal(result)


OFF_POLICY_MASK_MUTANTS = [("g97_off_policy_mask_never_applied", "without the off-policy sequence mask"),
                           ("g97_off_policy_mask_on_kl", "with the off-policy sequence mask on the KL term too")]


@pytest.mark.parametrize("mutant, formula", OFF_POLICY_MASK_MUTANTS)
def test_an_off_policy_mask_not_applied_or_on_the_kl_term_is_named(mutant, formula):
    """The off-policy sequence mask never applied, or applied after the KL term is added: the gradient of the mask's
    own run is named class 97, by the formula that reproduces it."""
    check_id = "logp_gradient[run=off_policy_mask]"
    result = broken(mutant, check_id)[check_id]
    assert not result.passed and classes(result) == {(97,)}, result.message
    assert f"the formula {formula}" in terminal(result)


@pytest.mark.parametrize("mutant, form", [("g98_adaptive_entropy_gate_ignored", "(the gate ignored)"),
                                          ("g98_adaptive_entropy_moved_before_the_last_micro_batch",
                                           "the last micro-batch of each window applying")])  # fmt: skip
def test_an_adaptive_entropy_control_gone_wrong_is_named(mutant, form):
    """Adaptive entropy control applying its coefficient whatever the last mean, or moving it before a window's last
    micro-batch: the bonus's gradient of the open run is named class 98, by the form that reproduces it."""
    check_id = "entropy_gradient[run=adaptive]"
    result = broken(mutant, check_id)[check_id]
    assert not result.passed and classes(result) == {(98,)}, result.message
    assert form in terminal(result)
