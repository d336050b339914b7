"""Known wrong formulas of the gradient at the new log-probs: which one reproduces what the target recorded.

`logp_gradient` (scenarios/gradients.py) compares each token's recorded dL/dlogp with the formula of
gradients.py. When that fails, each formula here is recomputed over the same micro-batches, with
the same window weights and the same tokens left out, and is named only when it reproduces the
recorded gradient at every compared token within the check's own tolerance (the largest gap
relative to the token's |formula| floored at the mean |formula|, as the check measures it):

    the KL term subtracted      the formula at -beta                                    (class 41)
    k3 the wrong way round      the KL term of exp(logp - ref) - (logp - ref) - 1        (class 21)
    another profile's loss      the formula with another profile's kl_clamp, kl_importance_weighting,
                                dual_clip_ratio and (dapo, cispo, vespo) token_mean_scope than the target
                                declares (profiles.py)
    a common factor             c x the formula, c fitted over every token
    a mean of micro-batch means c x each micro-batch's formula x its window's tokens / its own tokens
    bnpo of contract 1          (bnpo only) the formula x its micro-batch's own tokens / its window's tokens:
                                one count over the window, as GRPO contract 1 defined bnpo  (class 14)
    the entropy mask wrong      (top_entropy_quantile q < 1) the formula without the mask, with its threshold at
                                the q quantile, or with the KL term masked too                (class 77)
    the off-policy mask wrong   (off_policy_mask_threshold set) the formula without the mask, with its threshold
                                at 0, or with the KL term masked too                           (class 97)
    the padded width            (dr_grpo) divided by the completions' padded width            (class 93)
    the window's first count    (dapo, cispo, vespo) each micro-batch of a window that holds two generations
                                divided by its first micro-batch's generation's tokens         (class 94)
    the settings' defaults      (sapo, vespo) the formula with the loss type's own settings at TRL's defaults,
                                where the run configures others                                (class 70)

The first three are a mechanism; the last two describe a normaliser, so a mechanism that reproduces
the gradient as well wins (harness/diagnose.py's rule: fewest departures). They never change a
verdict; they name it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from harness.errors import NotRecomputable
from harness.report.format import fmt
from harness.tolerances import tolerance
from harness.verdict import Diagnosis

from ..definitions import GENERATION, IN_THE_LOSS, TOKEN_MEAN_LOSS_TYPES, TOKEN_MEAN_SCOPE
from ..oracle.expect import Settings
from ..oracle.gradients import METRIC, Compared, Gaps, generation_tokens, mean_scale, relative_gaps, weighted
from ..oracle.off_policy_mask import off_policy_mask
from ..oracle.token_gradients import kl_gradient, token_gradient
from ..spec import CLIPPED_LOSS_TYPES, SOFT_SETTINGS, GRPOSpec
from ..tolerances import TOLERANCES
from .profiles import other_values

SOURCE = "loss records"


def worded(gap: Gaps, dtype: str, metric: str = METRIC, at: str = "dL/dlogp", formula: str = "the formula") -> str:
    """What the largest gap compared, in words: 'dL/dlogp recorded at window 1 micro-batch 2, row 1, token 3 is 3
    where the formula gives 0 (...)' (`at` the gradient, `formula` what gives the expected value, `metric` the
    tolerance's row)."""
    worst, allowed = gap.worst, tolerance(metric, dtype, TOLERANCES).allowed(0.0, 1.0)
    if worst is None:
        return ""
    label = worst.label.replace(" micro-batch", ", micro-batch")
    return (f"{at} recorded at {label}, row {worst.row + 1}, token {worst.token + 1} is {fmt(worst.recorded)} "
            f"where {formula} gives {fmt(worst.formula)}: a gap of {fmt(gap.largest)} times the token's |formula| "
            f"(floored at the mean |formula| {fmt(gap.scale)}), tolerance {fmt(allowed)}")  # fmt: skip


def reversed_kl_gradient(row: Compared, s: Settings) -> torch.Tensor:
    """d l_t / d logp_t with k3 the wrong way round, exp(logp - ref) - (logp - ref) - 1: the formula's KL term
    replaced (the correcting ratio, the clamp and the weighting as the formula's: the ratio capped by delta for the
    clipped loss types)."""
    record = row.record
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    ratio = torch.exp(logps - old)
    capped, d_capped = ratio, ratio
    if s.loss_type in CLIPPED_LOSS_TYPES and s.delta is not None:
        capped, d_capped = ratio.clamp(max=s.delta), torch.where(ratio <= s.delta, ratio, torch.zeros_like(ratio))
    forward = kl_gradient(record, logps, capped, d_capped, s)
    backward = kl_gradient(record, logps, capped, d_capped, s, reverse=True)
    return row.terms.value + s.beta * (backward - forward)


def fitted(rows: Sequence[Compared], shapes: Sequence[torch.Tensor]) -> float:
    """The c that makes c * shape closest to the recorded gradient over the kept tokens (NaN when none)."""
    num = sum(float((r.got * w * ~r.terms.uncertain).nan_to_num().sum()) for r, w in zip(rows, shapes))
    den = sum(float((w * w * ~r.terms.uncertain).sum()) for r, w in zip(rows, shapes))
    return num / den if den > 0 else math.nan


def other_profiles_formulas(gap: Gaps, s: Settings) -> list[tuple[str, list[torch.Tensor]]]:
    """(what differs, in words, the gradient of each micro-batch) of each profile whose loss entries differ from
    those the target declares, and for the token-mean loss types its token_mean_scope (the window weights made with
    it: a profile whose weights cannot be made here, a generation not run in full, is left out)."""
    g = gap.weights
    ours = {name: getattr(s, name) for name in IN_THE_LOSS}
    if g is not None and s.loss_type in TOKEN_MEAN_LOSS_TYPES:
        ours[TOKEN_MEAN_SCOPE] = g.token_mean_scope
    out = []
    for words, theirs in other_values(ours):
        other = dataclasses.replace(s, **{name: theirs[name] for name in IN_THE_LOSS})
        weights = [r.weight for r in gap.rows]
        if TOKEN_MEAN_SCOPE in ours and theirs[TOKEN_MEAN_SCOPE] != ours[TOKEN_MEAN_SCOPE]:
            scoped = dataclasses.replace(g, settings=other, token_mean_scope=theirs[TOKEN_MEAN_SCOPE])
            try:
                weights = [weight for _, _, weight in weighted([r.record for r in gap.rows], scoped)]
            except NotRecomputable:
                continue
        terms = [token_gradient(r.record, other, r.terms.entropy) for r in gap.rows]
        wants = [dataclasses.replace(r, terms=t, weight=w).want for r, t, w in zip(gap.rows, terms, weights)]
        out.append((words, wants))
    return out


def entropy_mask_formulas(rows: Sequence[Compared], s: Settings) -> list[tuple[tuple[int, ...], str, list, int]]:
    """Under an entropy mask (top_entropy_quantile q < 1), class 77's: the formula without the mask, with the
    threshold at the q quantile (q taken for 1 - q), and (token level) with the KL term masked too."""
    q = s.top_entropy_quantile
    if q >= 1 or not rows:
        return []
    want = lambda r, other, mask=None: dataclasses.replace(r, terms=token_gradient(r.record, other, mask)).want  # noqa: E731
    unmasked = dataclasses.replace(s, top_entropy_quantile=1.0)
    out = [((77,), "the formula without the entropy mask (every token's policy term kept)",
            [want(r, unmasked) for r in rows], 1)]  # fmt: skip
    if 0 < q < 1 and q != 0.5:
        swapped = dataclasses.replace(s, top_entropy_quantile=1 - q)
        out.append(((77,), f"the formula with the entropy mask's threshold at the {fmt(q)} quantile, not 1 - {fmt(q)}",
                    [want(r, swapped) for r in rows], 1))  # fmt: skip
    if s.beta != 0 and not s.sequence_level:  # the KL term, the full formula less its policy-only part, masked too
        policy_only = dataclasses.replace(unmasked, beta=0.0)
        kl = [want(r, unmasked) - want(r, policy_only) for r in rows]
        out.append(((77,), "the formula with the entropy mask on the KL term too",
                    [r.want - k * ~r.terms.entropy.kept for r, k in zip(rows, kl)], 1))  # fmt: skip
    return out


def off_policy_mask_formulas(rows: Sequence[Compared], s: Settings) -> list[tuple[tuple[int, ...], str, list, int]]:
    """Under the off-policy sequence mask (off_policy_mask_threshold set), class 97's: the formula without the mask,
    with its threshold at 0 (every completion of negative advantage and positive KL estimate dropped), and (token
    level) with the KL term of the completions it drops masked too."""
    if s.off_policy_mask_threshold is None or not rows:
        return []
    want = lambda r, other: dataclasses.replace(r, terms=token_gradient(r.record, other, r.terms.entropy)).want  # noqa: E731
    unmasked = dataclasses.replace(s, off_policy_mask_threshold=None)
    out = [((97,), "the formula without the off-policy sequence mask (every completion's policy term kept)",
            [want(r, unmasked) for r in rows], 1),
           ((97,), "the formula with the off-policy sequence mask's threshold at 0",
            [want(r, dataclasses.replace(s, off_policy_mask_threshold=0.0)) for r in rows], 1)]  # fmt: skip
    if s.beta != 0 and not s.sequence_level:  # the KL term, the full formula less its policy-only part, masked too
        policy_only = dataclasses.replace(s, beta=0.0)
        kept = [off_policy_mask(r.record, s).kept for r in rows]
        out.append(((97,), "the formula with the off-policy sequence mask on the KL term too",
                    [r.want - (r.want - want(r, policy_only)) * ~k for r, k in zip(rows, kept)], 1))  # fmt: skip
    return out


def default_settings_formulas(rows: Sequence[Compared], s: Settings) -> list[tuple[tuple[int, ...], str, list, int]]:
    """Class 70's, under sapo or vespo where the run configures some of the loss type's own settings off their
    defaults: the formula with those settings at TRL's defaults (GRPOSpec's), as a trainer that hard-codes them
    computes it."""
    default = GRPOSpec()
    changed = {name: getattr(default, name) for name in SOFT_SETTINGS
               if name.startswith(f"{s.loss_type}_") and getattr(s, name) != getattr(default, name)}  # fmt: skip
    if not changed or not rows:
        return []
    other = dataclasses.replace(s, **changed)
    words = ", ".join(f"{name} {fmt(value)}" for name, value in changed.items())
    return [((70,), f"the formula with {s.loss_type}'s settings at their defaults ({words}), not the configured ones",
             [dataclasses.replace(r, terms=token_gradient(r.record, other, r.terms.entropy)).want for r in rows],
             1)]  # fmt: skip


def candidates(gap: Gaps, s: Settings) -> list[tuple[tuple[int, ...], str, list[torch.Tensor], int]]:
    """(classes, formula, the gradient of each micro-batch, departures) of each known wrong formula that applies."""
    rows = gap.rows
    out = []
    if s.beta != 0 and all(r.record.ref_logps is not None for r in rows):
        flipped = dataclasses.replace(s, beta=-s.beta)
        out.append(((41,), f"the formula with the KL term subtracted from the loss (beta {fmt(-s.beta)})",
                    [r.weight * token_gradient(r.record, flipped, r.terms.entropy).value for r in rows],
                    1))  # fmt: skip
        out.append(((21,), "the formula with k3 the wrong way round, exp(logp - ref) - (logp - ref) - 1",
                    [r.weight * reversed_kl_gradient(r, s) for r in rows], 1))  # fmt: skip
    for words, wants in other_profiles_formulas(gap, s):
        out.append(((), f"the formula with {words}", wants, 1))
    out += entropy_mask_formulas(rows, s)
    out += off_policy_mask_formulas(rows, s)
    out += default_settings_formulas(rows, s)
    wants = [r.want for r in rows]
    c = fitted(rows, wants)
    if math.isfinite(c) and abs(c - 1) > 1e-6:
        out.append(((), f"the recorded dL/dlogp is {c:.4g} times the formula's at every token (a common factor)",
                    [c * w for w in wants], 2))  # fmt: skip
    windows: dict[int, float] = {}
    for r in rows:
        windows[int(r.record.window)] = windows.get(int(r.record.window), 0.0) + float(r.record.completion_mask.sum())
    shares = [windows[int(r.record.window)] / max(float(r.record.completion_mask.sum()), 1.0) for r in rows]
    own = [w * share for w, share in zip(wants, shares)]
    c = fitted(rows, own)
    if math.isfinite(c) and max(shares, default=0.0) > min(shares, default=0.0) * (1 + 1e-9):  # else a common factor
        out.append(((), f"each micro-batch's dL/dlogp over its own tokens, not its window's, times {c:.4g}: a mean "
                        f"of micro-batch means", [c * w for w in own], 2))  # fmt: skip
    widths = [int(r.record.completion_mask.shape[1]) for r in rows]
    if s.loss_type == "dr_grpo" and any(w != s.max_completion_length for w in widths):  # 1 / (C_W width), not L
        out.append(((93,), "dr_grpo divided by the width the completions are padded to, not max_completion_length "
                           f"({s.max_completion_length})",
                    [w * s.max_completion_length / max(n, 1) for w, n in zip(wants, widths)], 1))  # fmt: skip
    out += first_generation_formulas(gap, s, wants)
    if s.loss_type == "bnpo":  # weight 1 / T_W, not 1 / (T_m K_W): the formula x K_W T_m / T_W
        counts: dict[int, int] = {}
        for r in rows:
            counts[int(r.record.window)] = counts.get(int(r.record.window), 0) + 1
        old = [w * counts[int(r.record.window)] / share for w, r, share in zip(wants, rows, shares)]
        out.append(((14,), "bnpo over the window's tokens (GRPO contract 1's bnpo)", old, 1))
    return out


def first_generation_formulas(gap: Gaps, s: Settings, wants: list[torch.Tensor]) -> list:
    """Class 94's, for a token-mean loss type that divides by its generation's tokens in windows that hold two
    generations: every micro-batch of a window divided by the count of its first micro-batch's generation."""
    g = gap.weights
    if g is None or s.loss_type not in TOKEN_MEAN_LOSS_TYPES or g.token_mean_scope != GENERATION:
        return []
    counts, first = generation_tokens([r.record for r in gap.rows], g), {}
    for r in gap.rows:
        first.setdefault(int(r.record.window), int(r.record.generation))
    pairs = [(int(r.record.generation), first[int(r.record.window)]) for r in gap.rows]
    if all(own == theirs for own, theirs in pairs) or not all(a in counts and b in counts for a, b in pairs):
        return []
    return [((94,), f"{s.loss_type} divided by the tokens of its window's first generation, not its own generation's",
             [w * counts[a] / counts[b] for w, (a, b) in zip(wants, pairs)], 1)]  # fmt: skip


def reproduces(rows: Sequence[Compared], wants: Sequence[torch.Tensor], allowed: float) -> float | None:
    """The largest relative gap of the recorded gradient to `wants` when every kept token is within `allowed`."""
    scale = mean_scale(wants, [r.record for r in rows])
    largest = 0.0
    for r, want in zip(rows, wants):
        if want.numel():
            largest = max(largest, float(relative_gaps(r.got, want, ~r.terms.uncertain, scale).max()))
    return largest if largest <= allowed else None


def diagnose(gap: Gaps, s: Settings, dtype: str) -> tuple[Diagnosis | None, str]:
    """(the one known wrong formula that reproduces the recorded gradient, '') or (None, why there is none)."""
    if not gap.rows or not all(torch.isfinite(r.got).all() for r in gap.rows):
        return None, ""
    allowed = tolerance(METRIC, dtype, TOLERANCES).allowed(0.0, 1.0)
    matches = []
    for classes, formula, wants, departures in candidates(gap, s):
        left = reproduces(gap.rows, wants, allowed)
        if left is not None:
            matches.append((departures, classes, formula, left))
    if not matches:
        return None, "no known wrong formula reproduces the recorded gradient"
    fewest = min(m[0] for m in matches)
    best = [m for m in matches if m[0] == fewest]
    if len(best) > 1:
        return None, f"no known wrong formula reproduces it unambiguously ({' / '.join(m[2] for m in best)} all do)"
    _, classes, formula, left = best[0]
    return Diagnosis(classes, f"{formula}, every token within {fmt(left)}", math.nan, math.nan, SOURCE), ""
