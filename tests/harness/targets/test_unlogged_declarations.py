"""A factory declares the contract's metrics its trainer does not log (`factory.unlogged_metrics`), read once into
the resolved `Target`; a declaration that is not a tuple of names, names no metric of its algorithm's contract, or
names one the factory also declares logged is a configuration error of one line (harness/targets/__init__.py)."""

from __future__ import annotations

import pytest

from harness.algorithms import get
from harness.algorithms.grpo.targets.reference import factory as grpo_factory
from harness.algorithms.ppo.targets.reference import factory as ppo_factory
from harness.errors import HarnessConfigError
from harness.targets import resolve
from tests.support.gate_run import verify
from tests.support.unlogged_doubles import without

HERE = "tests.harness.targets.test_unlogged_declarations"

grpo_declaring = without(grpo_factory, algorithm="grpo",
                         unlogged_metrics=["clip_ratio/low_min", "rewards/*/mean", "rewards/accuracy/std"])  # fmt: skip
ppo_declaring = without(ppo_factory, algorithm="ppo", unlogged_metrics=("val/ratio_var",))
BAD = {
    "a_string": "clip_ratio/low_min",
    "not_names": ("clip_ratio/low_min", 3),
    "unknown": ("clip_ratio/low_maen",),
    "no_pattern_of_the_contract": ("rewards/*/median",),
    "other_algorithm": ("val/ratio_var",),
    "logged_too": ("policy_loss",),
}
for _key, _declared in BAD.items():
    globals()[_key] = without(grpo_factory, algorithm="grpo", optional_metrics=("policy_loss",),
                              unlogged_metrics=_declared)  # fmt: skip


def test_the_declaration_resolves_into_the_target_once():
    target = resolve(f"{HERE}:grpo_declaring")
    assert target.unlogged_metrics == ("clip_ratio/low_min", "rewards/*/mean", "rewards/accuracy/std")
    grpo_declaring.unlogged_metrics = ()  # a later change to the factory is not the resolved target's
    try:
        assert target.unlogged_metrics[0] == "clip_ratio/low_min"
    finally:
        grpo_declaring.unlogged_metrics = ("clip_ratio/low_min", "rewards/*/mean", "rewards/accuracy/std")
    assert resolve(f"{HERE}:ppo_declaring").unlogged_metrics == ("val/ratio_var",)
    assert resolve("reference-grpo").unlogged_metrics == resolve("reference").unlogged_metrics == ()


def test_each_contract_knows_its_names_and_what_its_patterns_stand_for():
    grpo, ppo = get("grpo").contract, get("ppo").contract
    assert grpo.knows("clip_ratio/high_max") and grpo.knows("rewards/*/std") and grpo.knows("rewards/format/mean")
    assert not grpo.knows("rewards/format/median") and not grpo.knows("val/ratio_var")
    assert ppo.knows("val/ratio_var") and ppo.knows("objective/kl") and not ppo.knows("entropy")


@pytest.mark.parametrize(("key", "said"), [
    ("a_string", "`unlogged_metrics` of the factory must be a tuple of metric names, got 'clip_ratio/low_min'"),
    ("not_names", "`unlogged_metrics` of the factory must be a tuple of metric names"),
    ("unknown", "`unlogged_metrics` names 'clip_ratio/low_maen', no metric of the grpo contract"),
    ("no_pattern_of_the_contract", "`unlogged_metrics` names 'rewards/*/median', no metric of the grpo contract"),
    ("other_algorithm", "`unlogged_metrics` names 'val/ratio_var', no metric of the grpo contract"),
    ("logged_too", "'policy_loss' declared both logged (`optional_metrics`) and not logged (`unlogged_metrics`)"),
])  # fmt: skip
def test_a_bad_declaration_is_a_configuration_error_of_one_line(key, said):
    with pytest.raises(HarnessConfigError) as raised:
        resolve(f"{HERE}:{key}")
    message = str(raised.value)
    assert message.startswith(f"target '{HERE}:{key}': ") and said in message and "\n" not in message


def test_the_gate_exits_2_on_a_bad_declaration_saying_why_in_one_line(tmp_path):
    code, _, out = verify(tmp_path, "--target", f"{HERE}:unknown", "--check", "no_kl")
    assert code == 2, out
    said = [line for line in out.splitlines() if "`unlogged_metrics` names 'clip_ratio/low_maen'" in line]
    assert len(said) == 1, out
