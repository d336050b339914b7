"""The minibatch gradient is the token-count-weighted combination of its micro-batches' own gradients.

docs/metrics.md, "The update": the loss of a minibatch is the token mean over R of the policy loss plus
vf_coef * 0.5 * the token mean over V of the value loss, the counts taken over the whole minibatch. Write
g_i^pg and g_i^vf for the gradients of the token means over micro-batch i's own rows alone; then the step
gradient of the minibatch is

    G = sum_i (n_R,i / N_R) g_i^pg + vf_coef * sum_i (n_V,i / N_V) g_i^vf

At learning rate 0 the same rollout and the same permutation give both sides: run (a) cuts each
minibatch of 6 rows into micro-batches of 2 with accumulation; run (b) takes the same rows as minibatches of
2, one micro-batch each, so that each of (b)'s steps is one g_i. With vf_coef = 0 a step of (b) is g_i^pg;
with vf_coef = 1, subtracting the vf_coef = 0 step leaves g_i^vf. The four runs check the policy and the
value weights each. The counts come from the oracle's masks of the recorded responses, the row sets from
the row pairing: (a) and (b) must have seen the same rows in the same micro-batches, or nothing is compared.
Both sides are the sums of the backward passes' gradients before the step (what the loss says): clipping
to max_grad_norm, which rescales them, is every_microbatch_applied's to check.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.errors import NotRecomputable

from ..view import UpdateView

ROWS = 2
"""Rows of each micro-batch of (a), and of each minibatch of (b)."""


def same_rows(a: UpdateView, b: UpdateView) -> list[tuple[int, int]]:
    """(n_R, n_V) of each micro-batch, after checking (a) and (b) saw the same rows in the same micro-batches."""
    if a.rollout is None or b.rollout is None:
        raise NotRecomputable(a.rollout_problem or b.rollout_problem or "no rollout records")
    if not torch.equal(a.rollout.responses, b.rollout.responses):
        raise NotRecomputable("the two runs sampled different rollouts (the seed did not fix it)")
    if len(a.micro_batches) != len(b.micro_batches):
        raise NotRecomputable(f"{len(a.micro_batches)} and {len(b.micro_batches)} micro-batches: not the same rows")
    counts = []
    for m, (x, y) in enumerate(zip(a.micro_batches, b.micro_batches)):
        if x.rollout_rows is None or y.rollout_rows is None:
            raise NotRecomputable(f"micro-batch {m}: {x.old_problem or y.old_problem}")
        if sorted(x.rollout_rows.tolist()) != sorted(y.rollout_rows.tolist()):
            raise NotRecomputable(
                f"micro-batch {m}: rows {sorted(x.rollout_rows.tolist())} in one run, "
                f"{sorted(y.rollout_rows.tolist())} in the other (not the same permutation)"
            )
        counts.append((int(y.response_mask.sum()), int(y.value_mask.sum())))
    return counts


def combine(parts: Sequence[torch.Tensor], weights: Sequence[int]) -> torch.Tensor:
    """sum_i (w_i / sum w) parts_i, in float64 (0 when every weight is 0)."""
    total = sum(weights)
    out = torch.zeros_like(parts[0], dtype=torch.float64)
    for part, w in zip(parts, weights):
        if total > 0 and w:
            out += (w / total) * part.double()
    return out


def expected_steps(
    counts: Sequence[tuple[int, int]], policy: Sequence[torch.Tensor], value: Sequence[torch.Tensor] | None,
    per_minibatch: int,
) -> list[torch.Tensor]:  # fmt: skip
    """The step gradients of (a) from (b)'s per-micro-batch gradients: `policy` g_i^pg, `value` vf_coef * g_i^vf
    (None: vf_coef = 0), grouped `per_minibatch` micro-batches to a step."""
    if len(policy) != len(counts) or (value is not None and len(value) != len(counts)):
        raise NotRecomputable(f"{len(policy)} single-micro-batch steps for {len(counts)} micro-batches")
    steps = []
    for start in range(0, len(counts), per_minibatch):
        part = slice(start, start + per_minibatch)
        n_r, n_v = [c[0] for c in counts[part]], [c[1] for c in counts[part]]
        want = combine(policy[part], n_r)
        if value is not None:
            want += combine(value[part], n_v)
        steps.append(want)
    return steps


def relative_gap(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (NaN propagates: a non-finite gradient fails)."""
    return float((got.double() - want).abs().max()) / max(float(want.abs().max()), 1e-30)
