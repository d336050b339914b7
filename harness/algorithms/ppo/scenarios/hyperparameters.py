"""What the settings sweep's `hyperparameters` profile must show before its checks may pass: tokens whose formula
changes when a setting takes its default instead of the profile's value.

Every other run of the gate uses the defaults (gamma 1, lam 0.95, kl_coef 0.05, cliprange 0.2, cliprange_value 0.2),
so a trainer that hard-codes one of them, or drops gamma, is exact there. The profile sets each to another value; a
check that reads it passes a trainer only where the run holds evidence that the setting changed a compared number:

- cliprange: a response token, away from both clip edges (CLIP_MARGIN), whose clip indicator differs between the
  profile's cliprange and the default's (so its per-token loss and its gradient differ too);
- cliprange_value: the same for a value token and cliprange_value;
- gamma, lam, kl_coef: the raw advantages recomputed with the default in place of the profile's value differ from
  the profile's by more than the formula tolerance of per_token/advantages_raw (training_signal's own comparison);
  for the rollout objectives, kl_coef's objective/non_score_reward (or rlhf_reward) differs beyond its tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from harness.compare import compare
from harness.errors import NotRecomputable
from harness.oracle.pooling import Expectation
from harness.tolerances import margin_of

from ..oracle import signal, value_signal
from ..oracle.expect import expected_metrics
from ..oracle.returns import recompute
from ..oracle.values import micro_batch_values, rollout_values
from ..spec import ScenarioSpec
from ..tolerances import TOLERANCES
from ..view import RunView

DEFAULTS = ScenarioSpec()
"""The values a trainer that ignores a setting would use: the spec's (and TRL's PPOConfig's) defaults."""
CLIPS = ("cliprange", "cliprange_value")
RETURNS = ("gamma", "lam", "kl_coef")


def clip_tokens(view: RunView, spec: Any, scores: Sequence[Any]) -> dict[str, int]:
    """setting -> how many tokens of the run change their clip indicator with that setting at its default."""
    margin = margin_of(spec.dtype)
    eps, eps0 = spec.cliprange, DEFAULTS.cliprange
    c, c0 = spec.cliprange_value, DEFAULTS.cliprange_value
    found = {name: 0 for name in CLIPS}
    for update, score in zip(view.updates, scores):
        try:
            a = signal.advantages(update)
            sig = value_signal.signal_of(update, spec, score)
            new_values = micro_batch_values(update)
        except NotRecomputable:
            continue  # the check itself reports what it could not recompute
        for micro, v_new in zip(update.micro_batches, new_values):
            if micro.rollout_rows is None:
                continue
            rows, log_ratio = micro.rollout_rows, micro.log_ratio()
            _, flag = signal.policy_terms(a[rows], log_ratio, eps)
            _, flag0 = signal.policy_terms(a[rows], log_ratio, eps0)
            away = ~signal.near_the_clip(log_ratio, eps, margin) & ~signal.near_the_clip(log_ratio, eps0, margin)
            found["cliprange"] += int((micro.response_mask & away & (flag != flag0)).sum())
            v_old, returns = sig.values[rows], sig.returns[rows]
            _, vflag = value_signal.value_terms(v_new, v_old, returns, c)
            _, vflag0 = value_signal.value_terms(v_new, v_old, returns, c0)
            edges = [(v_new - (v_old + s * k)).abs() < margin for k in (c, c0) for s in (1, -1)]
            vaway = ~torch.stack(edges).any(dim=0)
            found["cliprange_value"] += int((micro.value_mask & vaway & (vflag != vflag0)).sum())
    return found


def advantage_gaps(view: RunView, spec: Any, scores: Sequence[Any]) -> dict[str, bool]:
    """setting -> whether the raw advantages with that setting at its default differ from the profile's beyond
    training_signal's tolerance of per_token/advantages_raw, in some update."""
    tells = {name: False for name in RETURNS}
    for update, score in zip(view.updates, scores):
        try:
            values = rollout_values(update)
            want = recompute(update.rollout, values, score, spec).advantages
        except NotRecomputable:
            continue
        r = update.rollout.response_mask
        size = float(torch.where(r, want.abs(), torch.zeros_like(want)).sum()) / max(int(r.sum()), 1)
        for name in RETURNS:
            other = recompute(update.rollout, values, score, spec.with_(**{name: getattr(DEFAULTS, name)})).advantages
            gap = float(torch.where(r, (other - want).abs(), torch.zeros_like(want)).max())
            label = "per_token/advantages_raw"
            verdicts = compare({label: gap}, {label: Expectation(label, 0.0, scale=size)}, spec.dtype, TOLERANCES,
                               kind="formula")  # fmt: skip
            tells[name] |= any(v.failed for v in verdicts)
    return tells


def objective_gaps(view: RunView, spec: Any, scores: Sequence[Any]) -> dict[str, bool]:
    """{"kl_coef": whether the rollout objectives at the default kl_coef differ from the profile's beyond their
    tolerance in some update} (what rollout_objectives reads of the settings)."""
    tells = False
    for update, score in zip(view.updates, scores):
        want = expected_metrics(update, spec.kl_coef, spec.kl_estimator, score, spec.missing_eos_penalty)
        other = expected_metrics(update, DEFAULTS.kl_coef, spec.kl_estimator, score, spec.missing_eos_penalty)
        names = [n for n in ("objective/non_score_reward", "objective/rlhf_reward") if want[n].value is not None]
        verdicts = compare({n: want[n].value for n in names}, {n: other[n] for n in names}, spec.dtype, TOLERANCES)
        tells |= any(v.failed for v in verdicts)
    return {"kl_coef": tells}


def untold(view: RunView, spec: Any, scores: Sequence[Any], settings: Sequence[str], objectives: bool) -> list[str]:
    """The problems: each of `settings` that the profile changed and that no compared number of the run tells (the
    rollout objectives where `objectives`, else the training signal and the gradient)."""
    changed = [s for s in settings if getattr(spec, s) != getattr(DEFAULTS, s)]
    problems = []
    if any(s in CLIPS for s in changed):
        tokens = clip_tokens(view, spec, scores)
        problems += [f"no token's clip indicator changes with {s} at {getattr(DEFAULTS, s):g} instead of "
                     f"{getattr(spec, s):g}" for s in CLIPS if s in changed and not tokens[s]]  # fmt: skip
    if any(s in RETURNS for s in changed):
        gaps = objective_gaps(view, spec, scores) if objectives else advantage_gaps(view, spec, scores)
        problems += [f"no compared number changes with {s} at {getattr(DEFAULTS, s):g} instead of "
                     f"{getattr(spec, s):g}" for s in RETURNS if s in changed and not gaps.get(s, True)]  # fmt: skip
    return problems
