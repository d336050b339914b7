"""The gradient of a GRPO window's loss at the new log-probs, against the loss type's formula.

Each token's d l_t / d logp_t is token_gradients.py's (the loss type's per-token formula, section 4 of
docs/grpo-metrics.md, with the KL term and the dual clip the target's definitions fix, and the policy term under the
entropy mask of its micro-batch on every rank where top_entropy_quantile is below 1: entropy_mask.py). The window's
loss weighs l_t by (section 4, every count over every rank):

    grpo, sapo           1 / (tokens of t's completion * completions of the window)
    bnpo                 1 / (tokens of t's micro-batch * micro-batches of the window)  (TRL's local batch)
    dr_grpo              1 / (completions of the window * max_completion_length)
    dapo, cispo, vespo   1 / (tokens of t's generation batch * micro-batches of the window / steps_per_generation)
                         (token_mean_scope 'generation', the default); 1 / tokens of t's window ('window')
    luspo                1 / completions of the window

and each rank's loss is multiplied by the number of ranks (data parallelism averages the ranks'
gradients), so the gradient a rank's backward pass delivers to its log-probs is world * weight * dl/dlogp.
The targets record that gradient per micro-batch (`logp_grad`, a hook on the tensor the log-prob
function returned in the loss); the oracle recomputes the formula in float64 from the records alone.
Unlike the comparison of two cuts (`gradient_partition`), the formula does not move with the cut: a
normaliser off by the same factor everywhere, a KL term of the wrong sign, a clipped surrogate that
keeps the wrong branch all show. Tokens whose ratio lies within the dtype's rounding margin of a clip
bound (or of delta), where the trainer's own rounding may pick either branch, are not compared.
Each token's gap is relative to its own size, floored at the mean |formula| over the masks: with
ratios far from 1 (an unclipped token of negative advantage) one token's gradient can be many
times the mean, and its float rounding with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.definitions import value_of
from harness.errors import NotRecomputable
from harness.instrument.loss import LossRecord
from harness.oracle.gradients import Factor, factor_note
from harness.oracle.pooling import Expectation

from ..definitions import GENERATION, TOKEN_MEAN_LOSS_TYPES, TOKEN_MEAN_SCOPE, WINDOW
from .entropy_mask import entropy_masks
from .expect import Settings
from .records import record_problems
from .token_gradients import SATURATED as SATURATED  # the gradient's formula, importable from here as before
from .token_gradients import TokenGradient, token_gradient

METRIC = "gradient/logp_relative"


@dataclass(frozen=True)
class WindowWeights:
    """What the window weights (`window_weights`) need beyond the records: the trainer settings, the steps per
    generation, the iterations per generation, the number of ranks and the token-mean loss types' count."""

    settings: Settings
    steps_per_generation: int
    num_iterations: int
    world: int = 1
    token_mean_scope: str = GENERATION
    """The tokens dapo, cispo and vespo divide by (definitions.py, token_mean_scope): the generation batch's times
    the window's share ('generation'), or the window's own ('window')."""

    @classmethod
    def of(cls, spec: Any, world: int = 1, definitions: Sequence[tuple[str, Any]] = ()) -> WindowWeights:
        """The weights of `spec`'s run on `world` ranks, its loss and its token count as the target's `definitions`
        fix them."""
        scope = value_of(tuple(definitions), TOKEN_MEAN_SCOPE, GENERATION)
        return cls(Settings.of(spec, definitions), spec.generation_steps, spec.num_iterations, world, scope)




def generation_tokens(records: Sequence[LossRecord], g: WindowWeights) -> dict[int, float]:
    """Completion tokens of each generation batch, every rank: each pass covers the batch once. A generation that
    did not run all its steps_per_generation * num_iterations micro-batches on every rank has no count."""
    tokens: dict[int, float] = {}
    runs: dict[int, int] = {}
    for record in records:
        gen = int(record.generation)
        tokens[gen] = tokens.get(gen, 0.0) + float(record.completion_mask.sum())
        runs[gen] = runs.get(gen, 0) + 1
    full = g.steps_per_generation * g.num_iterations * g.world
    return {gen: tokens[gen] / g.num_iterations for gen in tokens if runs[gen] == full}


def window_weights(records: Sequence[LossRecord], g: WindowWeights, generations: dict[int, float]
                   ) -> list[torch.Tensor]:  # fmt: skip
    """d(window loss) / d l_t of each record's tokens (B, T), times the number of ranks, zero off the mask.
    `records` are one window's micro-batches on every rank; `generations` the token count of each generation."""
    s = g.settings
    masks = [r.completion_mask.double() for r in records]
    completions = max(float(sum(m.shape[0] for m in masks)), 1.0)
    window_tokens = max(float(sum(m.sum() for m in masks)), 1.0)
    local_micro_batches = len(records) / g.world
    share = local_micro_batches / g.steps_per_generation
    out = []
    for record, mask in zip(records, masks):
        if s.loss_type in ("grpo", "sapo"):
            weight = mask / (mask.sum(dim=1, keepdim=True).clamp(min=1) * completions)
        elif s.loss_type == "bnpo":  # the micro-batch's own tokens: TRL's local batch
            weight = mask / (max(float(mask.sum()), 1.0) * local_micro_batches * g.world)
        elif s.loss_type == "dr_grpo":
            weight = mask / (completions * s.max_completion_length)
        elif s.loss_type == "luspo":
            weight = mask / completions
        elif s.loss_type in TOKEN_MEAN_LOSS_TYPES and g.token_mean_scope == WINDOW:
            weight = mask / window_tokens
        elif s.loss_type in TOKEN_MEAN_LOSS_TYPES:
            gen = int(record.generation)
            if gen not in generations:
                which = (f"generation {gen}" if gen >= 0 else
                         "the generation batch this log began inside (made before its records)")  # fmt: skip
                raise NotRecomputable(f"{which} did not run in full here: its token count ({s.loss_type}'s "
                                      f"normaliser) is unknown")  # fmt: skip
            weight = mask / (max(generations[gen], 1.0) * share)
        else:
            raise NotRecomputable(f"unknown loss_type {s.loss_type!r}")
        out.append(weight * g.world)
    return out


def weighted(records: Sequence[LossRecord], g: WindowWeights) -> Iterator[tuple[int, int, torch.Tensor]]:
    """(window, index in `records`, window weight) of every record, window by window (every rank's records of a
    window together); a window's weights are made when its first record is reached."""
    windows: dict[int, list[int]] = {}
    for i, record in enumerate(records):
        windows.setdefault(int(record.window), []).append(i)
    generations = generation_tokens(records, g)
    for w, indices in sorted(windows.items()):
        weights = window_weights([records[i] for i in indices], g, generations)
        yield from ((w, i, weight) for i, weight in zip(indices, weights))


def recorded(record: LossRecord, where: str) -> torch.Tensor:
    """The recorded gradient at a micro-batch's log-probs; NotRecomputable when no backward pass reached them."""
    grad = record.logp_grad
    if grad is None:
        raise NotRecomputable(
            f"{where}: no gradient reached the log-probs of the loss (not recorded, or the loss was not built "
            "from them)"
        )
    if tuple(grad.shape) != tuple(record.completion_mask.shape):
        raise NotRecomputable(f"{where}: gradient of shape {tuple(grad.shape)} for a mask of "
                              f"{tuple(record.completion_mask.shape)}")  # fmt: skip
    return grad.double()


@dataclass(frozen=True)
class Compared:
    """One micro-batch as compared: what was recorded, the window weight and the formula's terms."""

    label: str
    got: torch.Tensor
    weight: torch.Tensor
    terms: TokenGradient
    record: LossRecord

    @property
    def want(self) -> torch.Tensor:
        """The formula's gradient: the window weight times d l_t / d logp_t; at sequence level plus, on each token
        of a completion, 1/n of the completion's window-weighted sum of d l_t / dm (token_gradients.py)."""
        want = self.weight * self.terms.value
        if self.terms.shared is None:
            return want
        mask = self.record.completion_mask.double()
        spread = mask / mask.sum(dim=1, keepdim=True).clamp(min=1)
        return want + spread * (self.weight * self.terms.shared).sum(dim=1, keepdim=True)


@dataclass(frozen=True)
class Token:
    """The token of the largest gap: where it is, what was recorded there and what the formula gives."""

    label: str
    row: int
    token: int
    recorded: float
    formula: float


@dataclass(frozen=True)
class Gaps:
    """The comparison of one run's recorded gradients with the formula."""

    largest: float
    """The largest |recorded - formula| / (|formula| + scale) over the compared tokens (a NaN stays)."""
    where: str
    scale: float
    """Mean |formula| over the masked tokens."""
    factors: list[Factor]
    compared: int
    clipped: int
    worst: Token | None = None
    """The token of `largest` (None when no token was compared)."""
    rows: tuple[Compared, ...] = ()
    """Every micro-batch compared, in window order (the diagnosis recomputes known wrong formulas over them)."""
    capped: int = 0
    """Compared tokens whose gradient delta's cap zeroes."""
    dual: int = 0
    """Compared tokens whose policy-term gradient the declared dual clip zeroes."""
    settings: Settings | None = None
    """The settings the formula took (the target's definitions among them)."""
    weights: WindowWeights | None = None
    """The window weights the formula took (the target's token_mean_scope among them)."""


def mean_scale(wants: Sequence[torch.Tensor], records: Sequence[LossRecord]) -> float:
    """Mean |formula| over the masked tokens of every micro-batch."""
    masked = [want[r.completion_mask.bool()].abs() for want, r in zip(wants, records)]
    values = torch.cat(masked) if masked else torch.zeros(0, dtype=torch.float64)
    return float(values.mean()) if values.numel() else 0.0


def relative_gaps(got: torch.Tensor, want: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    """|recorded - formula| / (|formula| + scale) at each kept token, 0 elsewhere (a NaN stays)."""
    relative = (got - want).abs() / (want.abs() + scale)  # a token's own size, floored at the mean's
    return torch.where(keep, relative, torch.zeros_like(want))


def gaps(records: Sequence[LossRecord], g: WindowWeights) -> Gaps:
    """Recorded against formula over every micro-batch of every window (every rank's records together)."""
    if not records:
        raise NotRecomputable("the target recorded no loss inputs")
    for i, record in enumerate(records):
        problems = record_problems(record)
        if problems:
            raise NotRecomputable(f"loss record {i + 1}: {problems[0]}")
    tokens: dict[int, int] = {}
    for record in records:
        tokens[int(record.window)] = tokens.get(int(record.window), 0) + int(record.completion_mask.sum())
    rows, totals = [], []
    entropy = entropy_masks(records, g.settings.top_entropy_quantile)  # each micro-batch's, over every rank
    for w, i, weight in weighted(records, g):
        record, label = records[i], f"window {w + 1} micro-batch {i + 1}"
        terms = token_gradient(record, g.settings, entropy[i])
        rows.append(Compared(label, recorded(record, label), weight, terms, record))
        totals.append(tokens[w])
    scale = mean_scale([c.want for c in rows], [c.record for c in rows])
    largest, where, compared, clipped, capped, dual, factors, worst = 0.0, "", 0, 0, 0, 0, [], None
    for row, window_tokens in zip(rows, totals):
        got, want, keep = row.got, row.want, ~row.terms.uncertain
        relative = relative_gaps(got, want, keep, scale)
        gap = float(relative.max()) if want.numel() else 0.0
        if want.numel() and (gap > largest or gap != gap or worst is None):
            flat = int(relative.isnan().flatten().nonzero()[0]) if gap != gap else int(relative.argmax())
            b, t = divmod(flat, want.shape[1])
            worst = Token(row.label, b, t, float(got[b, t]), float(want[b, t]))
        if gap > largest or gap != gap:
            largest, where = gap, row.label
        mask = row.record.completion_mask.bool()
        compared += int((keep & mask).sum())
        clipped += int((row.terms.clipped & keep).sum())
        capped += int((row.terms.capped & keep).sum()) if row.terms.capped is not None else 0
        dual += int((row.terms.dual & keep).sum()) if row.terms.dual is not None else 0
        norm = float((want * want).sum())
        factors.append((float((got * want).sum()) / norm if norm > 0 else float("nan"), int(mask.sum()), window_tokens))
    return Gaps(largest, where, scale, factors, compared, clipped, worst, tuple(rows), capped, dual, g.settings, g)


def expectation(gap: Gaps) -> tuple[dict[str, float], dict[str, Expectation], str]:
    """(the largest relative gap, as if logged; an Expectation of 0 with scale 1; a note on the factors)."""
    note = factor_note(gap.factors, whole="window")
    return {METRIC: gap.largest}, {METRIC: Expectation(METRIC, 0.0, scale=1.0)}, note
