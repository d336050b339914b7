"""Definitions a target declares (harness/definitions.py, harness/algorithms/grpo/definitions.py): validated once,
read by the oracle, and a trainer whose numbers match another profile than the one it declares is caught by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.algorithms.grpo.definitions import ADVANTAGE_EPSILON, PARTIAL_LAST_INTERVAL, VOCABULARY
from harness.errors import HarnessConfigError
from harness.targets import resolve
from tests.support.gates import gate

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = "tests.support.verl_like"


def test_a_target_that_declares_nothing_is_held_to_the_default_profile():
    assert VOCABULARY.default == "trl"
    loss = (("kl_clamp", None), ("kl_importance_weighting", "as_configured"), ("dual_clip_ratio", None),
            ("token_mean_scope", "generation"), ("policy_loss_includes_kl", True),
            ("metric_pooling", "interval"), ("kl_population", "token_mean"), ("entropy_pass", "update"),
            ("logging_cadence", "configured"), ("cispo_clip_population", "positive_advantage"),
            ("truncation", "no_stop"))  # fmt: skip
    declared = resolve("tests.support.no_vespo:refusing").definitions
    assert declared == ((ADVANTAGE_EPSILON, 1e-4), (PARTIAL_LAST_INTERVAL, "optional"), *loss)
    # the reference declares that it logs a partial last interval, and keeps TRL's epsilon and loss
    assert resolve("reference-grpo").definitions == ((ADVANTAGE_EPSILON, 1e-4), (PARTIAL_LAST_INTERVAL, "logged"),
                                                     *loss)  # fmt: skip


@pytest.mark.parametrize(
    ("declared", "value"),
    [("verl", 1e-6), ({"profile": "verl"}, 1e-6), ({ADVANTAGE_EPSILON: 1e-5}, 1e-5),
     ({"profile": "verl", ADVANTAGE_EPSILON: 2e-6}, 2e-6), ({ADVANTAGE_EPSILON: 1}, 1.0)],
)  # fmt: skip
def test_a_profile_or_an_entry_fixes_each_value(declared, value):
    assert dict(VOCABULARY.resolve(declared))[ADVANTAGE_EPSILON] == value


@pytest.mark.parametrize(
    ("declared", "said"),
    [("deepspeed", "no definitions profile 'deepspeed'; known: 'trl', 'verl'"),
     ({"advantage_eps": 1e-6}, "no definition 'advantage_eps'; known: advantage_epsilon, partial_last_interval"),
     ({PARTIAL_LAST_INTERVAL: "sometimes"}, "takes one of 'logged', 'optional'"),
     ({ADVANTAGE_EPSILON: -1e-6}, "takes a finite positive number"), ({ADVANTAGE_EPSILON: True}, "positive number"),
     ({ADVANTAGE_EPSILON: "1e-6"}, "positive number"), (["verl"], "a profile's name or a dict")],
)  # fmt: skip
def test_a_declaration_that_cannot_be_read_is_one_configuration_error(declared, said):
    with pytest.raises(HarnessConfigError, match=re.escape(said)):
        VOCABULARY.resolve(declared)


def test_an_algorithm_without_definitions_refuses_a_declaration():
    from harness.definitions import Vocabulary

    with pytest.raises(HarnessConfigError, match="its algorithm publishes no definitions"):
        Vocabulary().resolve("verl")


def test_a_ppo_target_declares_a_profile_and_an_unknown_one_names_the_target(monkeypatch):
    from harness.algorithms.ppo.definitions import MINIBATCH_PERMUTATION
    from harness.algorithms.ppo.targets import reference

    assert resolve("reference").definitions == ((MINIBATCH_PERMUTATION, "per_epoch"),)
    monkeypatch.setattr(reference.factory, "definitions", "verl", raising=False)
    assert resolve("reference").definitions == ((MINIBATCH_PERMUTATION, "fixed"),)
    monkeypatch.setattr(reference.factory, "definitions", "openrlhf", raising=False)
    with pytest.raises(HarnessConfigError, match="target 'reference': no definitions profile 'openrlhf'"):
        resolve("reference")


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_the_docs_list_every_entry_and_profile_with_its_value(algorithm):
    from harness.algorithms import get

    vocabulary = get(algorithm).definitions
    text = (ROOT / "docs/definitions.md").read_text(encoding="utf-8")
    assert vocabulary.definitions
    for definition in vocabulary.definitions:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{definition.name}` |"))
        assert definition.formula in row
        for profile in vocabulary.profiles:
            value = profile.values[definition.name]
            assert (f"{value:g}" if isinstance(value, float) else f"`{value}`") in row
            assert f"`{profile.name}`, `{definition.name}`" in text


def advantages(target: str) -> dict:
    report = gate(target, checks=("advantages[scale_rewards=group]",))
    return report["checks"][0]


@pytest.mark.slow  # three GRPO reward runs
def test_verls_epsilon_passes_declared_and_fails_by_name_undeclared_or_misdeclared():
    assert advantages(f"{DOUBLE}:declaring")["status"] == "pass"
    undeclared = advantages(f"{DOUBLE}:undeclared")
    formula = undeclared["metrics"][0]["diagnosis"]["formula"]
    assert undeclared["status"] == "fail" and formula.startswith("advantage_epsilon 1e-06 (the verl profile's)")
    misdeclared = advantages(f"{DOUBLE}:misdeclared")
    formula = misdeclared["metrics"][0]["diagnosis"]["formula"]
    assert misdeclared["status"] == "fail" and formula.startswith("advantage_epsilon 0.0001 (the trl profile's)")


def run_logging(logs: int):
    from harness.algorithms.grpo.scenarios.schedule import SCHEDULE
    from harness.instrument.observe import Observation, Ran

    return Observation(SCHEDULE, Ran(tuple({} for _ in range(logs)), None, 0, 1))


@pytest.mark.parametrize(("declared", "logs", "expected"), [("optional", 2, 2), ("optional", 3, 3), ("logged", 2, 3),
                                                            ("logged", 3, 3)])  # fmt: skip
def test_a_partial_last_interval_may_go_unlogged_only_where_the_target_declares_it_optional(declared, logs, expected):
    """The schedule run logs 7 steps every 3: two whole intervals and a partial one. A trainer whose definitions let
    it leave the partial one unlogged (TRL's, through transformers' Trainer) is held to the two it logged; one that
    declares it logs it (the reference) to three, so a trainer of its that drops it fails the log count."""
    import types

    from harness.algorithms.grpo.scenarios.schedule import judged, log_steps
    from harness.targets import Target
    from harness.verdict import Check, CheckId

    target = Target("t", "grpo", print, definitions=((PARTIAL_LAST_INTERVAL, declared),))
    check = Check(CheckId("schedule"))
    obs = judged(types.SimpleNamespace(target=target), run_logging(logs), check)
    assert obs.spec.total_logs == expected and len(log_steps(obs.spec)) == expected
    assert any("not logged" in n for n in check.notes) == (expected == 2)
