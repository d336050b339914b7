"""A resolved target is one value carrying what it declares, read once; a run's outcome is a neutral record plus
its algorithm's own payload, which another algorithm's view refuses (harness/targets/__init__.py,
harness/instrument/observe.py)."""

from __future__ import annotations

import pytest

from harness.algorithms import builtin_targets, builtin_targets_with_argument, get
from harness.algorithms.grpo.instruments import GRPORecords
from harness.algorithms.grpo.instruments import recorded as grpo_recorded
from harness.algorithms.ppo.instruments import PPORecords
from harness.algorithms.ppo.instruments import recorded as ppo_recorded
from harness.instrument.grad import GradTrace
from harness.instrument.observe import Ran
from harness.targets import extras, resolve

HERE = "tests.harness.targets.test_declarations"


def declaring(spec):
    """A GRPO factory of a user's, declaring an optional metric and a contract version."""
    from harness.algorithms.grpo.targets.reference import factory

    return factory(spec)


declaring.algorithm = "grpo"
declaring.optional_metrics = ("policy_loss",)
declaring.contract_version = 1


def test_resolve_reads_what_a_factory_declares_into_the_target_once():
    target = resolve(f"{HERE}:declaring")
    assert (target.algorithm, target.optional_metrics, target.contract_version, target.extras) == (
        "grpo", ("policy_loss",), 1, ()
    )  # fmt: skip
    declaring.optional_metrics = ()  # a later change to the factory is not the resolved target's
    try:
        assert target.optional_metrics == ("policy_loss",)
    finally:
        declaring.optional_metrics = ("policy_loss",)


def test_a_built_in_target_pins_its_algorithm_s_contract_and_declares_the_extras_it_needs():
    reference = resolve("reference-grpo")
    assert reference.optional_metrics == ("policy_loss",) and reference.extras == ()
    assert reference.contract_version == get("grpo").contract.version
    # TRL's adapters need an install extra each, read without loading (nor importing TRL)
    assert extras("trl") == extras("trl:my_pkg.ppo_trainer") == ("trl-ppo",)
    assert extras("trl-grpo") == extras("trl-grpo:my_pkg.grpo_trainer") == ("trl",)
    assert extras("reference") == extras("reference-grpo") == extras(f"{HERE}:declaring") == ()


def test_every_extra_a_built_in_target_declares_is_one_of_the_package_s():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from tests.support.gate_run import ROOT

    package = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = [*builtin_targets(), *(f"{name}:my_pkg.module" for name in builtin_targets_with_argument())]
    declared = {extra for name in names for extra in extras(name)}
    assert declared == {"trl", "trl-ppo", "verl", "openrlhf"} and declared <= set(package)


def test_an_algorithm_s_view_refuses_another_algorithm_s_payload():
    grpo_run = Ran((), GradTrace(), 0, 2, GRPORecords(loss_inputs=()))
    assert grpo_recorded(grpo_run).loss_inputs == ()
    with pytest.raises(TypeError, match="is a GRPORecords, not a PPORecords"):
        ppo_recorded(grpo_run)
    with pytest.raises(TypeError, match="is a PPORecords, not a GRPORecords"):
        grpo_recorded(Ran((), GradTrace(), 0, 2, PPORecords()))


def test_each_algorithm_declares_its_instruments_and_its_specs_name_the_same():
    for name in ("ppo", "grpo"):
        algorithm = get(name)
        assert algorithm.run_spec(0, "cpu", "float32").instruments is algorithm.instruments
    assert get("grpo").instruments.members == ("loss_inputs",) and get("ppo").instruments.members == ()
