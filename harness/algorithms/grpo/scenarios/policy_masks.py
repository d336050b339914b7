"""What a run under a mask of the policy term must show for `logp_gradient` to tell the mask from its absence and
from a wrong threshold: TRL's entropy mask (`run=top_entropy`, also across ranks) and its off-policy sequence mask
(`run=off_policy_mask`). Each counts what the formula's mask decided, leaving out what lies within rounding of its
threshold, and fails the check loudly when the run decided too little."""

from __future__ import annotations

from harness.verdict import Check

from ..oracle import gradients
from ..oracle.off_policy_mask import dropped
from ..spec import GRPOSpec


def shows_mask(check: Check, gap: gradients.Gaps, spec: GRPOSpec) -> bool:
    """Whether the run left some policy terms of non-zero advantage out by the entropy mask and kept some (a note),
    else a failure: a run without either cannot tell a threshold of every rank's tokens from another."""
    out, kept = entropy_masked(gap)
    said = f"{out} tokens of non-zero advantage whose policy term the entropy mask leaves out, {kept} it keeps"
    if not out or not kept:
        check.fail(f"{said}: the run did not show the mask (top_entropy_quantile {spec.top_entropy_quantile:g})")
        return False
    check.note(said)
    return True


def entropy_masked(gap: gradients.Gaps) -> tuple[int, int]:
    """(left out, kept): compared tokens of non-zero advantage (their policy term has a gradient) whose policy term
    the formula's entropy mask leaves out or keeps, none within rounding of the threshold (0, 0 without a mask)."""
    out = kept = 0
    for row in gap.rows:
        mask = row.terms.entropy
        if mask is not None:
            live = row.record.completion_mask.bool() & ~mask.uncertain & (row.record.advantages != 0).unsqueeze(1)
            out, kept = out + int((live & ~mask.kept).sum()), kept + int((live & mask.kept).sum())
    return out, kept


def shows_sequence_mask(check: Check, gap: gradients.Gaps, spec: GRPOSpec) -> bool:
    """Whether the run's off-policy sequence mask dropped some completion of negative advantage and kept one whose KL
    estimate lies above 0 (a note), else a failure: a run without a drop cannot tell the mask from none, and one
    without such a keep cannot tell its threshold from 0 (every completion of negative advantage dropped once the
    policy moved away from it)."""
    settings = gap.settings or gradients.WindowWeights.of(spec).settings
    out = kept = 0
    for row in gap.rows:
        d, k = dropped(row.record, settings)
        out, kept = out + d, kept + k
    said = (f"{out} completions of negative advantage whose policy term the off-policy mask drops, {kept} it keeps "
            f"at a KL estimate above 0")  # fmt: skip
    if not out or not kept:
        check.fail(f"{said}: the run did not show the mask (off_policy_mask_threshold "
                   f"{spec.off_policy_mask_threshold:g})")  # fmt: skip
        return False
    check.note(said)
    return True
