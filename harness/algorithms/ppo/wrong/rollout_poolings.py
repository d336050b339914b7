"""The known wrong ways to average the rollout objectives, as data (classes 7 and 13 of docs/bug-catalogue.md).

Class 7: the pad sentinel summed into objective/entropy. Class 13: a per-sample mean over the
samples padded with zero rows up to a multiple of the rollout chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.diagnose import Candidate, diagnosed
from harness.verdict import MetricVerdict

from ..spec import ScenarioSpec
from ..tolerances import TOLERANCES
from ..view import RolloutView

INVALID_LOGPROB = 1.0
"""The pad sentinel a trainer writes into its rollout log-probs outside R."""


def padded_samples(samples: int, chunk: int) -> int:
    """`samples` rounded up to a multiple of the rollout chunk (the chunk no larger than the batch)."""
    step = max(1, min(chunk, samples))
    return samples + (-samples % step)


def sentinel_entropy(rollout: RolloutView) -> float:
    """objective/entropy with -log-prob summed over every position, the pads at the sentinel (-1 each)."""
    logprobs = rollout.logprobs.double()
    per_row = torch.where(rollout.response_mask, -logprobs, torch.full_like(logprobs, -INVALID_LOGPROB)).sum(dim=-1)
    return float(per_row.mean()) if per_row.numel() else 0.0


def rollout_candidates(name: str, rollout: RolloutView, expected: float | None, chunk: int) -> list[Candidate]:
    """What objective/`name` would log from the known wrong rollout poolings of one update.

    Class 7: the pad sentinel summed into objective/entropy. Class 13: the per-sample mean taken over
    the samples padded with zero rows up to a multiple of the rollout chunk (every objective shrinks
    by samples / padded).
    """
    samples = rollout.samples
    shrink = samples / padded_samples(samples, chunk)
    pad = f"mean over the samples padded with zero rows to a multiple of the rollout chunk ({chunk})"
    out = []
    if shrink != 1.0 and expected is not None:
        out.append(Candidate((13,), f"per-sample sums over R, {pad}", expected * shrink, "view: rollout rows"))
    if name == "objective/entropy":
        value = sentinel_entropy(rollout)
        text = f"per-sample sums of -log-prob over every position, pads at the sentinel {INVALID_LOGPROB} (-1 each)"
        out.append(Candidate((7,), f"{text}, mean over samples", value, "view: rollout log-probs and R"))
        if shrink != 1.0:
            out.append(Candidate((7, 13), f"{text}, {pad}", value * shrink, "view: rollout log-probs and R", 2))
    return out


def diagnose_rollout(verdicts: Sequence[MetricVerdict], rollout: RolloutView | None, expected: dict,
                     spec: ScenarioSpec) -> list[MetricVerdict]:  # fmt: skip
    """The rollout-objective verdicts of one update with a diagnosis on each failure."""
    if rollout is None:
        return list(verdicts)
    names = [v.name for v in verdicts]
    make = {n: (lambda n=n: rollout_candidates(n, rollout, expected[n].value, spec.rollout_chunk)) for n in names}
    return diagnosed(verdicts, make, spec.dtype, TOLERANCES)
