"""entropy_gradient[run=adaptive] and [run=adaptive_gated]: TRL's adaptive entropy control (`use_adaptive_entropy`).
The oracle's control applies none before the first step, then the coefficient moved by the last window's mean entropy
within its floor and ceiling, only at or below the target, and leaves the windows after a mean within rounding of the
target uncompared; the cases pass the reference, fail a trainer without the control (named class 98), refuse a run
whose windows lie on the wrong side of the target, and the settings reach the reference's and TRL's trainers."""

from __future__ import annotations

import math

import pytest
import torch

from harness.algorithms import case
from harness.algorithms.grpo.oracle.adaptive_entropy import Control, applied, window_means
from harness.algorithms.grpo.scenarios import entropy
from harness.algorithms.grpo.spec import GRPOSpec
from harness.algorithms.grpo.targets.openrlhf.config import refusal as openrlhf_refusal
from harness.algorithms.grpo.targets.trl.config import trl_args
from harness.algorithms.grpo.targets.verl.config import refusal as verl_refusal
from harness.errors import HarnessConfigError
from harness.instrument.observe import Observation
from reference_trainers import ConfigError, grpo
from tests.support.gates import reference
from tests.support.grpo_doubles import FixedCache, ignoring, record

OPEN, GATED = "entropy_gradient[run=adaptive]", "entropy_gradient[run=adaptive_gated]"
CONTROL = Control(initial=0.01, minimum=0.0, maximum=0.02, delta=0.005, target=1.0)


def test_the_control_applies_none_first_then_moves_within_its_floor_and_ceiling():
    coefs, unsure = applied({0: 0.5, 1: 0.5, 2: 0.5, 3: 2.0, 4: 2.0, 5: 0.5}, CONTROL)
    # none before a step; up to 0.015, then the ceiling 0.02 held; a mean above the target shuts the gate for the
    # next window and moves the coefficient down (0.015), which the window after applies once a mean is below again
    assert coefs == pytest.approx({0: 0.0, 1: 0.015, 2: 0.02, 3: 0.02, 4: 0.0, 5: 0.0}) and not unsure
    # two windows above the target: down to 0 (the floor), the bonus held off until a window's mean is below it
    assert applied({0: 2.0, 1: 2.0, 2: 0.5, 3: 0.5}, CONTROL)[0] == pytest.approx({0: 0, 1: 0, 2: 0, 3: 0.005})
    floor = applied({0: 2.0, 1: 2.0, 2: 2.0, 3: 0.5, 4: 0.5}, CONTROL)[0]
    assert floor[4] == pytest.approx(0.005)  # 0.01 -> 0.005 -> 0 -> 0 (the floor) -> 0.005, applied after a low mean


def test_a_first_coefficient_above_the_ceiling_is_applied_at_the_ceiling():
    """TRL clamps a step up at the ceiling (and a step down at the floor alone): the first coefficient applied after
    a step up is the ceiling, however far above it the run began."""
    high = Control(initial=0.05, minimum=0.0, maximum=0.02, delta=0.005, target=1.0)
    assert applied({0: 0.5, 1: 0.5}, high)[0] == {0: 0.0, 1: 0.02}
    assert applied({0: 2.0, 1: 0.5, 2: 0.5}, high)[0] == {0: 0.0, 1: 0.0, 2: 0.02}


def test_the_wrong_controls():
    means = {0: 0.5, 1: 0.5, 2: 2.0}
    assert applied(means, CONTROL, gate=False)[0] == pytest.approx({0: 0.01, 1: 0.015, 2: 0.02})
    assert applied(means, CONTROL, adapt=False)[0] == pytest.approx({0: 0.0, 1: 0.01, 2: 0.01})
    assert applied(means, CONTROL, lag=False)[0] == pytest.approx({0: 0.015, 1: 0.02, 2: 0.0})


def test_a_mean_within_rounding_of_the_target_leaves_every_later_window_uncertain():
    _, unsure = applied({0: 0.5, 1: 1.0 + 1e-7, 2: 0.5, 3: 0.5}, CONTROL)
    assert unsure == {2, 3}
    assert applied({0: 0.5, 1: 1.001}, CONTROL)[1] == set()


def test_a_windows_mean_is_over_its_acting_tokens_on_every_rank():
    a = record([[True, True, False]], [[-1.0] * 3], [1.0], entropies=[[1.0, 3.0, 9.0]])
    b = record([[True, False, False]], [[-1.0] * 3], [1.0], entropies=[[5.0, 9.0, 9.0]])
    empty = record([[False, False, False]], [[-1.0] * 3], [1.0], window=1)
    means = window_means([a, b, empty], [r.completion_mask.bool() for r in (a, b, empty)])
    assert means == {0: 3.0, 1: 0.0}
    assert Control.of(GRPOSpec()) is None
    on = GRPOSpec(use_adaptive_entropy=True, entropy_coef=0.01)
    assert Control.of(on) == Control(0.01, 0.0, 1.0, 0.005, 0.2)


def test_settings_out_of_range_are_configuration_errors():
    with pytest.raises(HarnessConfigError, match="entropy_coef_min"):
        GRPOSpec(entropy_coef_min=0.5, entropy_coef_max=0.1).validate()
    with pytest.raises(HarnessConfigError, match="entropy_coef_min"):
        GRPOSpec(entropy_target=math.nan).validate()
    with pytest.raises(ConfigError, match="entropy_coef_delta"):
        grpo.GRPOConfig(entropy_coef_delta=-0.1)


def test_the_cases_run_uneven_lengths_with_the_control_and_hand_it_over():
    spec = entropy.bonus_spec(GRPOSpec(), case(OPEN, "grpo"))
    assert spec.use_adaptive_entropy and spec.entropy_target == 5.0 and spec.entropy_coef == entropy.ENTROPY_COEF
    assert entropy.bonus_spec(GRPOSpec(), case(GATED, "grpo")).entropy_target == 0.5
    args = trl_args(spec, "out", {})
    assert (args["use_adaptive_entropy"], args["entropy_coef_max"], args["entropy_target"]) == (True, 0.02, 5.0)
    assert "use_adaptive_entropy" not in trl_args(GRPOSpec(), "out", {})
    assert "adaptive control" in verl_refusal(spec) and "adaptive control" in openrlhf_refusal(spec)


@pytest.fixture(scope="module")
def runs():
    specs = {check: entropy.bonus_spec(GRPOSpec(), case(check, "grpo")) for check in (OPEN, GATED)}
    return {check: reference("grpo").get(spec, spy=False) for check, spec in specs.items()}


@pytest.mark.parametrize("check", [OPEN, GATED])
def test_the_reference_passes_and_says_what_its_run_showed(runs, check):
    result = case(check, "grpo").run(FixedCache.of(runs[check]), GRPOSpec())
    assert result.passed, result.message
    assert "adaptive control: the windows' mean entropies" in result.message
    want = "0, 0.015, 0.02" if check == OPEN else "coefficients 0;"
    assert want in result.message, result.message


@pytest.mark.parametrize("check", [OPEN, GATED])
def test_a_trainer_without_the_control_fails_and_is_named(runs, check):
    """The run of a trainer that ignores use_adaptive_entropy (entropy_coef at every window), judged as the case's:
    it fails, named class 98 by the form with the first coefficient throughout."""
    constant = ignoring(runs[check], use_adaptive_entropy=False)
    result = case(check, "grpo").run(FixedCache.of(constant), GRPOSpec())
    assert not result.passed, result.message
    diagnoses = [m.diagnosis for m in result.metrics if m.diagnosis is not None]
    assert any(d.classes == (98,) and "the adaptive control off" in d.formula for d in diagnoses), diagnoses


def test_a_run_on_the_wrong_side_of_its_target_is_refused(runs):
    """The open run's records judged at the gated run's target: the case fails saying the run did not show the
    control open, rather than judging a run that is not the one it is for."""
    opened = runs[OPEN]
    shut = Observation(opened.spec.with_(entropy_target=0.5), opened.outcome)
    result = case(OPEN, "grpo").run(FixedCache.of(shut), GRPOSpec())
    assert not result.passed and "the run did not show the adaptive control open" in result.message, result.message


def test_the_reference_moves_its_coefficient_as_the_control_says():
    """The trainer's own state after the open run: three steps up from 0.01, the third held at the ceiling."""
    from harness.algorithms.grpo.targets.reference import factory

    run = factory(entropy.bonus_spec(GRPOSpec(), case(OPEN, "grpo")))
    run.trainer.train()
    assert run.trainer.entropy_coef == pytest.approx(0.02) and run.trainer.last_window_entropy < 5.0
    assert torch.isfinite(torch.tensor(run.trainer.last_window_entropy))
