"""Systems knobs never change a statistic (harness/invariance.py): a metric that changes with the cut is a finding
naming the knob it depends on, on the trainers that have the bug (TRL's entropy and kl) and on none that do not."""

from __future__ import annotations

import pytest

from harness.invariance import CutRun, Knob, knob_findings
from tests.support.gates import gate

KNOBS = (Knob("bs", "the micro-batch size"), Knob("gas", "the accumulation steps"), Knob("iters", "the passes"))
REFERENCE = {"bs": 4, "gas": 2, "iters": 1}


def cut(bs: int, gas: int, iters: int, **changed: tuple[float, float]) -> CutRun:
    return CutRun({"bs": bs, "gas": gas, "iters": iters}, f"bs={bs},gas={gas},iters={iters}", changed)


def test_the_knob_every_changing_run_changed_and_no_run_changing_it_alone_kept_is_named():
    runs = [cut(2, 4, 1, entropy=(2.0, 2.5)), cut(8, 1, 1, entropy=(2.0, 2.25)), cut(4, 1, 1), cut(4, 2, 2)]
    (finding,) = knob_findings(REFERENCE, runs, KNOBS)
    # bs and gas both changed in each run that moved entropy; the run that changed gas alone kept it
    assert finding.formula == "entropy depends on the micro-batch size (4 -> 2)"
    assert finding.classes == ()
    assert (finding.value, finding.gap, finding.source) == (2.5, 0.5, "2 at the reference cut")


def test_two_knobs_are_named_when_the_runs_cannot_tell_them_apart_and_none_when_no_knob_explains():
    (both,) = knob_findings(REFERENCE, [cut(2, 4, 1, kl=(1.0, 0.5))], KNOBS)
    assert both.formula == "kl depends on the micro-batch size (4 -> 2) and the accumulation steps (2 -> 4)"
    runs = [cut(2, 4, 1, kl=(1.0, 0.5)), cut(4, 2, 2, kl=(1.0, 0.75)), cut(2, 2, 1), cut(4, 4, 1)]
    (none,) = knob_findings(REFERENCE, runs, KNOBS)
    assert none.formula == "kl depends on how the batch is cut (at bs=2,gas=4,iters=1)"


def test_no_finding_where_nothing_changed():
    assert knob_findings(REFERENCE, [cut(2, 4, 1), cut(8, 1, 1)], KNOBS) == []


@pytest.mark.slow  # two gates' partition check, TRL's among them
def test_trl_entropy_and_kl_depend_on_the_micro_batch_size_and_the_reference_on_nothing():
    """TRL's GRPOTrainer logs entropy and kl as flat means of micro-batch means (class 16): at LR 0 they move when
    only the cut of the generation batch does. The reference trainer's do not."""
    trl = next(c for c in gate("trl-grpo", checks=("partition",))["checks"] if c["id"] == "partition")
    said = [d["formula"] for d in trl["diagnoses"]]
    assert any(s.startswith("entropy depends on the micro-batch size (4 -> 2)") for s in said), said
    assert any(s.startswith("kl depends on the micro-batch size (4 -> 2)") for s in said), said
    reference = next(c for c in gate("reference-grpo", checks=("partition",))["checks"] if c["id"] == "partition")
    assert reference["status"] == "pass" and reference["diagnoses"] == []


@pytest.mark.slow  # TRL's PPO partition check
def test_trl_ppo_means_depend_on_the_micro_batch_size():
    """TRL 1.12.0's PPOTrainer logs its `*_avg` statistics as means of per-minibatch means: at LR 0 a split of
    the same batch into micro-batches of 12 instead of 4 moves them."""
    check = next(c for c in gate("trl", checks=("partition_invariance",))["checks"])
    said = [d["formula"] for d in check["diagnoses"]]
    assert any(s.startswith("policy/entropy_avg depends on the micro-batch size (4 -> ") for s in said), said


@pytest.mark.slow  # two gates' partition[run=clipping], TRL's among them
def test_trl_clip_fractions_depend_on_the_micro_batch_size_with_the_weights_moving_and_the_reference_on_nothing():
    """Two passes at LR 0.05 in windows of 8 completions, cut into micro-batches of 4, 2 and 8: the step does not
    depend on that cut, so neither may what is logged over the update's tokens. TRL's clip fractions, flat means of
    micro-batch means (class 16), move with the micro-batch size alone; the reference trainer's do not, and the run
    clips tokens (the point requires one)."""
    point = "partition[run=clipping]"
    trl = next(c for c in gate("trl-grpo", checks=(point,))["checks"] if c["id"] == point)
    said = [d["formula"] for d in trl["diagnoses"]]
    for name in ("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean"):
        assert f"{name} depends on the micro-batch size (4 -> 2)" in said, said
    reference = next(c for c in gate("reference-grpo", checks=(point,))["checks"] if c["id"] == point)
    assert reference["status"] == "pass" and reference["diagnoses"] == []


@pytest.mark.parametrize("setting", [{"dtype": "bfloat16"}, {"settings": ("loss_type=bnpo",)}])
def test_the_clipping_cuts_are_not_applicable_where_the_update_itself_depends_on_the_cut(setting):
    """In half precision the update's rounding follows the micro-batch's shape; under bnpo its step gradient is a
    mean of micro-batch means by definition: either moves the weights with the cut, so the point says it cannot
    judge, with its reason, and does not run."""
    point = "partition[run=clipping]"
    check = next(c for c in gate("reference-grpo", checks=(point,), **setting)["checks"] if c["id"] == point)
    assert check["status"] == "not_applicable", check
    assert ("half precision" if "dtype" in setting else "bnpo") in check["message"], check


def refusing(keep: int):
    """The reference GRPO target refusing, as a library that cuts whole windows only does, every cut with a short
    window (`keep` 1), or every cut but the reference one (`keep` 0)."""
    from harness.algorithms.grpo.targets.reference import factory
    from harness.errors import HarnessConfigError

    def build(spec):
        cut = (spec.per_device_train_batch_size, spec.gradient_accumulation_steps, spec.steps_per_generation,
               spec.num_iterations)  # fmt: skip
        first = cut == (4, 2, 2, 1)  # partition's reference cut (runs.CUTS[0])
        short = spec.generation_steps % spec.gradient_accumulation_steps != 0
        if spec.name == "partition" and not first and (short or not keep):  # partition's LR-0 cuts alone
            raise HarnessConfigError("this target cuts whole windows only")
        return factory(spec)

    for key in ("algorithm", "optional_metrics", "definitions"):
        setattr(build, key, getattr(factory, key))
    return build


refuses_short_windows = refusing(1)
refuses_every_other_cut = refusing(0)


def test_a_cut_the_target_refuses_is_named_and_the_others_compared():
    """partition runs the cuts a target can run: the refused one (windows 3+1) is named in a note, never silently
    dropped, and the six others are compared; with only the reference cut left there is nothing to compare, a
    failure."""
    here = "tests.harness.test_invariance"
    some = next(c for c in gate(f"{here}:refuses_short_windows", checks=("partition",))["checks"])
    assert some["status"] == "pass", some["message"]
    assert "cut bs=2,gas=3,spg=4,iters=1 not run: the target refuses it" in some["message"], some["message"]
    assert len({m["where"] for m in some["metrics"] if m["where"]}) == 6  # the reference cut and five others
    none = next(c for c in gate(f"{here}:refuses_every_other_cut", checks=("partition",))["checks"])
    assert none["status"] == "fail" and "only 1 of the 7 cuts could be run" in none["message"], none["message"]
