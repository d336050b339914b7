"""GRPO's `sampling[ranks=N]` of verify-dist: each rank's completions, read from its loss records, handed to the check
(harness/checks/rank_sampling.py, where the comparison and its bound are reasoned).

TRL seeds each process with `set_seed(seed, device_specific=True)` (the seed plus the process index). Where two
ranks seeded alike sample one prompt (TRL's RepeatSampler spreads a group over the ranks) their completions are
copies of each other, and the group's reward std collapses; where they sample different prompts, as the reference
trainer does (each rank's generation batch whole groups of its own prompts), the k-th completion of each rank is
drawn with the same noise at every position. The uneven run's two generations hold n of 124 to 274 aligned
positions at seeds 0-4; seeded apart, the reference's Z is -1.4 to 0.8 there; seeded alike, its ranks agree at 26
to 47 % of those positions, Z 23 to 37.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.checks.rank_sampling import sampling_across_ranks as judged
from harness.instrument.observe import Ran
from harness.verdict import CheckId, CheckResult

from .instruments import recorded

SOURCE = "loss records with `completion_ids`"
"""Where a GRPO rank's completions are read from, as a failure names it."""


def completions_of(ran: Ran) -> dict[int, torch.Tensor]:
    """Generation -> (N, T) this rank's completion ids of it, each completion once, in the order of their places."""
    seen: dict[int, dict[int, torch.Tensor]] = {}
    for record in recorded(ran).loss_inputs or ():
        ids = torch.as_tensor(record.completion_ids).long()
        places = (range(len(ids)) if record.completions is None
                  else torch.as_tensor(record.completions).reshape(-1).tolist())  # fmt: skip
        for j, place in enumerate(places):
            seen.setdefault(int(record.generation), {}).setdefault(int(place), ids[j])
    return {g: torch.stack([rows[p] for p in sorted(rows)]) for g, rows in seen.items()}


def sampling_across_ranks(ranks: Sequence[Ran], check_id: CheckId) -> CheckResult:
    """Fail when some pair of ranks drew its aligned completions with the same noise (harness/checks/rank_sampling)."""
    drawn = [completions_of(r) for r in ranks]
    return judged(drawn, ranks[0].stop_token_id, ranks[0].pad_token_id, check_id, SOURCE)
