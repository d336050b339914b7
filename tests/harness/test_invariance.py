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
