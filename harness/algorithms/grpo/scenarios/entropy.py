"""The GRPO gate's entropy-bonus scenario: `entropy_gradient`, the gradient at each token's entropy against the
bonus's formula (TRL's `entropy_coef`: the loss less coef times the mean per-token entropy of the optimizer step's
window, every rank's tokens; docs/grpo-metrics.md section 4, oracle/entropy_bonus.py).

Its run is uneven_lengths' geometry (two generations of 16 completions that end at the stop token, two windows of
two micro-batches of 4 each) with an entropy bonus: the micro-batches of a window hold unequal numbers of tokens,
where a mean of micro-batch means (TRL's per-micro-batch bonus, class 82) differs from the window's mean, and the
check fails a run that shows no such window. The same run's gradient at the log-probs must still be the policy
objective's (`logp_gradient`'s formula): the bonus adds to the loss and takes nothing from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.loss import LossRecord
from harness.instrument.observe import ObservationCache
from harness.oracle.pooling import Expectation
from harness.require import require_ran
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult, MetricStatus, MetricVerdict, Wording

from ..instruments import recorded
from ..oracle import entropy_bonus, gradients
from ..oracle.adaptive_entropy import Control
from ..runs import TOP_ENTROPY_QUANTILE, UNEVEN, spec_for
from ..spec import GRPOSpec
from ..tolerances import TOLERANCES
from ..wrong import entropy_bonus as wrong
from .gradients import judge
from .preconditions import definitions, require_records

ENTROPY_COEF = 0.01
"""entropy_coef of the run: a small bonus, as used in practice (Skywork-OR1's adaptive control starts near it); the
gradient at the entropies is linear in it, so any non-zero value tells the window's mean from a micro-batch's."""
ADAPTIVE_TARGETS = {"adaptive": 5.0, "adaptive_gated": 0.5}
"""entropy_target of the adaptive control's runs (TRL's use_adaptive_entropy): above every window's mean entropy
(the toy vocabulary's entropy is at most ln 32 = 3.47 nats), so the control applies the coefficient from the second
step on and moves it up to its ceiling; below every one (the reference's at seed 0: 2.89 to 2.92), so it holds the
bonus off throughout. Each run must show it: a window on the wrong side of its target fails the case."""
ADAPTIVE_CONTROL = {"entropy_coef_delta": 0.005, "entropy_coef_max": 0.02, "max_steps": 4}
"""The rest of those runs: from ENTROPY_COEF up by 0.005 to the ceiling 0.02, four windows (0, 0.015, 0.02 and 0.02
applied under the first target: none, a step up, a step up to the ceiling, the ceiling held)."""


def bonus_spec(run: GRPOSpec, case: Case | None = None) -> GRPOSpec:
    """uneven_lengths' run with the entropy bonus at ENTROPY_COEF (the run's other settings its own); `run=top_entropy`:
    under the entropy mask too (top_entropy_quantile TOP_ENTROPY_QUANTILE), where the bonus acts on the tokens the
    mask keeps, counted over the window before its first micro-batch's backward pass."""
    spec = spec_for(UNEVEN, run).with_(name="entropy_bonus", entropy_coef=ENTROPY_COEF)
    name = case.param("run", None) if case is not None else None
    if name == "top_entropy":
        spec = spec.with_(top_entropy_quantile=TOP_ENTROPY_QUANTILE)
    if name in ADAPTIVE_TARGETS:
        spec = spec.with_(use_adaptive_entropy=True, entropy_target=ADAPTIVE_TARGETS[name], **ADAPTIVE_CONTROL)
    return spec


def entropy_gradient(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """dL/dH of every token of every micro-batch equals -entropy_coef * world / (its window's tokens on every rank),
    0 off the mask; the gradient at the log-probs is the policy objective's (logp_gradient's formula)."""
    check = Check(case.id)
    obs = cache.get(bonus_spec(run, case), spy=False)
    declared = definitions(cache)
    if require_ran(obs, check) is None or require_records(obs, check, declared) is None:
        return check.finish()
    spec, records = obs.spec, recorded(obs.ran).loss_inputs
    bonus_gradient(check, records, spec, len({int(r.rank) for r in records}) or 1, declared, spec.split_label,
                   opens=case.param("run", None) == "adaptive")  # fmt: skip
    return check.finish()


def bonus_gradient(check: Check, records: Sequence[LossRecord], spec: GRPOSpec, world: int,
                   declared: Sequence[tuple[str, Any]], where: str, opens: bool = False) -> None:  # fmt: skip
    """Judge the bonus's dL/dH of every token of `records` (every rank's) against -entropy_coef * world / (its
    window's acting tokens on every rank), and dL/dlogp against the policy objective's formula, on `check`; a run
    that shows no window of unequal micro-batches fails it, and under adaptive control one that does not show the
    control open (`opens`) or holding the bonus off (shows_control). Shared with verify-dist's
    entropy_gradient[ranks=N]."""
    try:
        gap = entropy_bonus.gaps(records, spec.entropy_coef, world, spec.top_entropy_quantile, Control.of(spec))
        policy = gradients.gaps(records, gradients.WindowWeights.of(spec, world, definitions=declared))
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return
    if gap.compared == 0 or policy.compared == 0:
        check.fail(f"no token's gradient to compare ({gap.compared} at the entropies, {policy.compared} at the "
                   f"log-probs)")  # fmt: skip
        return
    if gap.uneven == 0:
        check.fail("no window whose micro-batches hold unequal token counts: the run cannot tell the window's mean "
                   "entropy from a mean of micro-batch means")  # fmt: skip
        return
    check.note(f"{gap.uneven} windows whose micro-batches hold unequal token counts; {gap.compared} tokens' dL/dH "
               f"compared")  # fmt: skip
    if gap.means is not None and not shows_control(check, gap, spec, opens):
        return
    logged = {entropy_bonus.METRIC: gap.largest}
    expected = {entropy_bonus.METRIC: Expectation(entropy_bonus.METRIC, 0.0, scale=1.0)}
    verdicts = compare(logged, expected, spec.dtype, TOLERANCES, kind="formula", where=f"{where} {gap.where}")
    check.absorb([explained(v, gap, spec, where) for v in verdicts])
    judge(check, policy, spec, f"{where} {policy.where}")


def explained(verdict: MetricVerdict, gap: entropy_bonus.BonusGaps, spec: GRPOSpec, where: str) -> MetricVerdict:
    """A failing verdict with its token in words and the known wrong form that reproduces it; any other as it is."""
    if verdict.status is not MetricStatus.FAIL:
        return verdict
    diagnosis, why = wrong.diagnose(gap, spec.dtype, Control.of(spec))
    words = wrong.worded(gap, spec.dtype)
    said = {"reason": words, "wording": Wording.CHECK} if words else {}
    return dataclasses.replace(verdict, where=where, diagnosis=diagnosis, diagnosis_reason=why, **said)


def shows_control(check: Check, gap: entropy_bonus.BonusGaps, spec: GRPOSpec, opens: bool) -> bool:
    """Whether every window's mean entropy lies on the side of entropy_target its run is for (at or below it where
    the control `opens`, else above it), and an open control reaches the ceiling (a note); else a failure: the run
    did not show what it is for."""
    means, target = gap.means or {}, spec.entropy_target
    wrong_side = [w + 1 for w, m in sorted(means.items()) if (m <= target) != opens]
    coefs = [row.coef for row in gap.rows]
    said = ", ".join(f"{m:.4g}" for _, m in sorted(means.items()))
    if not means or wrong_side or (opens and spec.entropy_coef_max not in coefs):
        check.fail(f"the windows' mean entropies {said} against entropy_target {target:g} (windows {wrong_side} on "
                   f"the other side; applied coefficients {sorted(set(coefs))}): the run did not show the adaptive "
                   f"control {'open' if opens else 'holding the bonus off'}")  # fmt: skip
        return False
    check.note(f"adaptive control: the windows' mean entropies {said}, entropy_target {target:g}; applied "
               f"coefficients {', '.join(f'{c:g}' for c in sorted(set(coefs)))}")  # fmt: skip
    return True


ENTROPY_SCENARIOS = (
    Scenario("entropy_gradient", entropy_gradient, (),
             f"dL/dH per token == -entropy_coef * world / (the window's tokens, every rank), 0 off the mask, and "
             f"dL/dlogp the policy objective's (uneven lengths with entropy_coef {ENTROPY_COEF:g}: the micro-batches "
             f"of a window hold unequal token counts; also under the entropy mask, top_entropy_quantile "
             f"{TOP_ENTROPY_QUANTILE:g}: the bonus's tokens those the mask keeps; under adaptive entropy control, "
             f"each window's coefficient, its entropy_target above every window's mean and below every one)",
             ((), (("run", "top_entropy"),), (("run", "adaptive"),), (("run", "adaptive_gated"),))),
)  # fmt: skip
