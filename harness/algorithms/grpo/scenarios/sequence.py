"""What a sequence-level run (importance_sampling_level 'sequence', GSPO) must show before its gradient or its clip
flags are compared: each loss type's ratio reaches its loss in its own way, so each run is refused on its own
grounds when it shows nothing of it (scenarios/gradients.py and pooled.py use these).

    grpo    completions clipped whole (the clip zeroes every token's policy term of the completion)
    cispo   completions whose ratio is above epsilon_high (their weight is the cap, not the ratio)
    sapo    completions whose ratio is BENT or more off 1 (the gate's slope 4 sigma (1 - sigma) s is 1 at s = 1)
    vespo   tokens whose formula gradient changes with a ratio per token: vespo's own weight phi is of the summed
            log-ratios at either level (TRL's get_gamma_weights), so the sequence ratio reaches its loss only
            through the KL's bias correction (none at beta 0 or with the KL uncorrected; at ratio 1 too, the
            correction's gradient spreads each completion's k3 over its tokens through the mean log-ratio)
"""

from __future__ import annotations

import dataclasses

import torch

from harness.tolerances import tolerance

from ..oracle import gradients
from ..oracle.expect import log_ratios
from ..oracle.token_gradients import token_gradient
from ..spec import CLIPPED_LOSS_TYPES
from ..tolerances import TOLERANCES

BENT = 0.05
"""sapo: a completion's ratio this far from 1 or more bends its gate (off_policy's least spread of the ratios)."""


def clipped_completions(gap: gradients.Gaps) -> int:
    """Compared rows whose tokens the clip zeroes: at sequence level a completion is clipped whole or not at all."""
    return sum(int(row.terms.clipped.any(dim=1).sum()) for row in gap.rows)


def completion_ratios(row: gradients.Compared, s) -> torch.Tensor:
    """(B,) each completion's sequence ratio s = exp of its mean log-ratio over its mask (1 for an empty one)."""
    record, mask = row.record, row.record.completion_mask.bool()
    logps = record.logps.double()
    old = record.old_logps.double() if record.old_logps is not None else logps
    return torch.exp(log_ratios(logps, old, mask, s)[:, 0])


def weighted_completions(gap: gradients.Gaps, hit) -> int:
    """Compared completions with a token and a non-zero advantage whose sequence ratio `hit` (a predicate on the
    (B,) ratios) holds."""
    count = 0
    for row in gap.rows:
        has = row.record.completion_mask.bool().any(dim=1) & (row.record.advantages != 0)
        count += int((hit(completion_ratios(row, gap.settings)) & has).sum())
    return count


def levels_told_apart(gap: gradients.Gaps, dtype: str) -> int:
    """Compared tokens whose formula gradient at a ratio per token is off the sequence-level one by more than the
    gradient's tolerance: those a trainer that ignores the sequence level gets wrong."""
    token_level = dataclasses.replace(gap.settings, importance_sampling_level="token")
    allowed = tolerance(gradients.METRIC, dtype, TOLERANCES).scale_tol
    told = 0
    for row in gap.rows:
        other = dataclasses.replace(row, terms=token_gradient(row.record, token_level, row.terms.entropy))
        keep = ~row.terms.uncertain & ~other.terms.uncertain & row.record.completion_mask.bool()
        told += int((gradients.relative_gaps(other.want, row.want, keep, gap.scale) > allowed).sum())
    return told


def shown(gap: gradients.Gaps, dtype: str) -> tuple[int, str]:
    """(how many, what) the run shows of what its loss type's sequence level changes (the module's table)."""
    s = gap.settings
    if s.loss_type in CLIPPED_LOSS_TYPES:
        return clipped_completions(gap), "completions clipped whole (their policy term's gradient zeroed)"
    if s.loss_type == "cispo":
        capped = weighted_completions(gap, lambda ratio: ratio > s.epsilon_high)
        return capped, f"completions whose ratio is above epsilon_high {s.epsilon_high:g} (their weight capped)"
    if s.loss_type == "sapo":
        bent = weighted_completions(gap, lambda ratio: (ratio - 1).abs() >= BENT)
        return bent, f"completions whose ratio is {BENT:g} or more off 1 (sapo's gate bent)"
    return levels_told_apart(gap, dtype), "tokens whose gradient changes with a ratio per token (the KL's correction)"


def flagged_completions(terms, loss_type: str) -> torch.Tensor:
    """(B,) each completion's clip flag at sequence level (one per completion, every token of it carries it): the
    region flag of the clipped loss types, cispo's r > epsilon_high where A > 0."""
    return (terms.cispo if loss_type == "cispo" else terms.region).bool().any(dim=1)
