"""The oracle: every logged PPO statistic recomputed in float64 from spy records.

It never imports or calls the trainer under test. It reads what the spy copied out of
the trainer's own calls (response ids, log-probs, per-token entropies, the per-token
values handed to `masked_mean`), derives the masks R and V itself from the response ids,
and applies the definitions of docs/metrics.md: sums over all micro-batches that ran,
counts from its own masks, one division at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.errors import HarnessConfigError
from harness.report import failure_line as failure_line  # re-exported for the scenarios
from harness.spy import Record
from harness.tolerances import Tolerance, close, tolerance

POOLED = (
    "loss/policy_avg",
    "policy/clipfrac_avg",
    "loss/value_avg",
    "val/clipfrac_avg",
    "policy/approxkl_avg",
    "policy/entropy_avg",
    "val/ratio",
    "val/ratio_var",
)
ROLLOUT = (
    "objective/kl",
    "objective/entropy",
    "objective/non_score_reward",
    "objective/scores",
    "objective/rlhf_reward",
)
MICRO_BATCH_ROLES = ("pg_loss", "pg_clipfrac", "vf_loss", "vf_clipfrac")
"""masked_mean sites that belong to the micro-batch started by the last `new_logprobs`."""
LOGPROB_ROLES = ("logprob", "ref_logprob", "new_logprobs")
"""selective_log_softmax sites: rollout policy, rollout reference, training micro-batch."""
STATUSES = ("pass", "fail", "missing", "not_recomputable", "nan")


class NotRecomputable(Exception):
    """The records do not determine a metric (ambiguous rows, missing sites); says why."""


@dataclass(frozen=True)
class SiteMap:
    """Assigned names of the call sites the oracle reads (the defaults fit reference_ppo and TRL)."""

    logprob: str = "logprob"
    ref_logprob: str = "ref_logprob"
    new_logprobs: str = "new_logprobs"
    pg_loss: str = "pg_loss"
    pg_clipfrac: str = "pg_clipfrac"
    vf_loss: str = "vf_loss"
    vf_clipfrac: str = "vf_clipfrac"

    def role(self, record: Record) -> str | None:
        """Which role ('logprob', 'pg_loss', ...) `record` plays, or None for other sites."""
        if record.fn == "selective_log_softmax":
            roles = LOGPROB_ROLES
        elif record.fn == "masked_mean":
            roles = MICRO_BATCH_ROLES
        else:
            return None
        return next((role for role in roles if getattr(self, role) == record.site.name), None)


@dataclass
class MicroBatch:
    """One micro-batch: its `new_logprobs` record and the masked_mean records that followed."""

    logprobs: Record
    sites: dict[str, list[Record]] = field(default_factory=dict)

    @property
    def responses(self) -> torch.Tensor:
        """(rows, T) response token ids of this micro-batch."""
        return self.logprobs.index

    @property
    def rows(self) -> int:
        """Number of rows in this micro-batch."""
        return int(self.responses.shape[0])


@dataclass
class Update:
    """The records of one rollout + optimisation round."""

    index: int = 0
    label: str | None = None
    start_seq: int | None = None
    """`seq` of the record (or mark) that opened this update."""
    rollout: list[Record] = field(default_factory=list)
    ref: list[Record] = field(default_factory=list)
    micro_batches: list[MicroBatch] = field(default_factory=list)
    stray: list[Record] = field(default_factory=list)
    """Micro-batch-site records seen before any `new_logprobs` record of this update."""
    ignored: list[Record] = field(default_factory=list)
    """Records at other sites (e.g. inside masked_whiten)."""

    def is_empty(self) -> bool:
        """True when no record was filed under this update."""
        return not (self.rollout or self.ref or self.micro_batches or self.stray or self.ignored)

    def responses(self) -> torch.Tensor:
        """(N, T) rollout response ids: the `index` of the `logprob` records, in order."""
        return _cat([r.index for r in self.rollout], "rollout 'logprob' responses", self.index)

    def old_logprobs(self) -> torch.Tensor:
        """(N, T) rollout log-probs of the policy, in order."""
        return _cat([r.logprobs for r in self.rollout], "rollout 'logprob' log-probs", self.index)

    def ref_logprobs(self) -> torch.Tensor:
        """(N, T) reference log-probs, in order."""
        return _cat([r.logprobs for r in self.ref], "rollout 'ref_logprob' log-probs", self.index)

    def ref_responses(self) -> torch.Tensor:
        """(N, T) response ids of the `ref_logprob` records, in order."""
        return _cat([r.index for r in self.ref], "rollout 'ref_logprob' responses", self.index)


@dataclass(frozen=True)
class Expected:
    """The oracle's value for one metric, or why it has none (`value is None`).

    `required=False` marks a metric left out by the caller's choice (no scores given),
    which `compare` reports without failing.
    """

    name: str
    value: float | None
    reason: str | None = None
    count: int | None = None
    required: bool = True

    @property
    def recomputable(self) -> bool:
        """True when the oracle has a value."""
        return self.value is not None


@dataclass(frozen=True)
class MetricResult:
    """One logged metric against the oracle. `tol` is the allowed gap around `expected`."""

    name: str
    logged: float | None
    expected: float | None
    abs_err: float | None
    rel_err: float | None
    tol: float | None
    status: str
    reason: str = ""
    required: bool = True

    @property
    def passed(self) -> bool:
        """True for status 'pass'."""
        return self.status == "pass"

    @property
    def failed(self) -> bool:
        """Anything but a pass fails, except a not-recomputable metric the caller opted out of."""
        return not self.passed and (self.required or self.status != "not_recomputable")


def _cat(parts: list[torch.Tensor], what: str, update: int) -> torch.Tensor:
    """Concatenate recorded row blocks, or say why they cannot be."""
    if not parts:
        raise NotRecomputable(f"update {update}: no {what} were recorded")
    widths = {tuple(p.shape[1:]) for p in parts}
    if len(widths) != 1:
        raise NotRecomputable(f"update {update}: {what} have different shapes {sorted(widths)}")
    return torch.cat(parts)


# ---------------------------------------------------------------------------- masks


def derive_masks(
    responses: torch.Tensor, stop_token_id: int | None, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, V) boolean masks of shape (N, T) from raw response ids (docs/architecture.md).

    Truncate after the first stop token (fill with pad); `sequence_length` is the first
    pad position minus one (T - 1 without pad); R = t <= sequence_length, V = t <= it + 1.
    """
    responses = torch.as_tensor(responses)
    width = responses.shape[-1]
    positions = torch.arange(width).expand_as(responses)
    if stop_token_id is not None:
        first_stop = _first_true(responses == stop_token_id)
        after_stop = positions > first_stop.unsqueeze(-1)
        responses = torch.where(after_stop, torch.full_like(responses, pad_token_id), responses)
    sequence_length = _first_true(responses == pad_token_id) - 1
    response_mask = positions <= sequence_length.unsqueeze(-1)
    value_mask = positions <= (sequence_length + 1).unsqueeze(-1)
    return response_mask, value_mask


def _first_true(flags: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last axis, or its length where there is none."""
    width = flags.shape[-1]
    found = flags.any(dim=-1)
    first = flags.to(torch.int8).argmax(dim=-1)
    return torch.where(found, first, torch.full_like(first, width))


# ---------------------------------------------------------------------------- grouping


def split_updates(records: Iterable[Record], sites: SiteMap | None = None) -> list[Update]:
    """Group records (in call order) into updates.

    A `logprob` record that follows a `new_logprobs` record starts a new update, and so
    does a mark. Each `new_logprobs` record starts a micro-batch; the micro-batch-site
    masked_mean records after it belong to it.
    """
    sites = sites or SiteMap()
    updates: list[Update] = []
    current = Update()
    for record in sorted(records, key=lambda r: r.seq):
        role = sites.role(record)
        if record.fn == "mark" or (role == "logprob" and current.micro_batches):
            if not current.is_empty():
                updates.append(current)
            current = Update(label=record.label if record.fn == "mark" else None, start_seq=record.seq)
            if record.fn == "mark":
                continue
        if current.start_seq is None:
            current.start_seq = record.seq
        _add(current, record, role)
    if not current.is_empty():
        updates.append(current)
    for number, update in enumerate(updates):
        update.index = number
    return updates


def update_starts(
    records: Sequence[Record], sites: SiteMap | None = None, updates: Sequence[Update] | None = None
) -> list[int]:
    """Position in `records` (as given, in call order) of the record that opens each update.

    `updates`, when given, is `split_updates(records, sites)` already made.
    """
    position = {record.seq: i for i, record in enumerate(records)}
    updates = split_updates(records, sites) if updates is None else updates
    return [position[u.start_seq] for u in updates if u.start_seq in position]


def _add(update: Update, record: Record, role: str | None) -> None:
    """File `record` under its role in `update`."""
    if role == "logprob":
        update.rollout.append(record)
    elif role == "ref_logprob":
        update.ref.append(record)
    elif role == "new_logprobs":
        update.micro_batches.append(MicroBatch(record))
    elif role in MICRO_BATCH_ROLES and update.micro_batches:
        update.micro_batches[-1].sites.setdefault(role, []).append(record)
    elif role in MICRO_BATCH_ROLES:
        update.stray.append(record)
    else:
        update.ignored.append(record)


def observed_geometry(update: Update) -> list[int]:
    """Rows of each micro-batch in the order they ran, e.g. [4, 2, 4, 2]."""
    return [mb.rows for mb in update.micro_batches]


def padded_rows(update: Update, stop_token_id: int | None, pad_token_id: int) -> list[int]:
    """Rollout rows whose response mask R stops before the last position (they carry padding)."""
    response_mask, _ = derive_masks(update.responses(), stop_token_id, pad_token_id)
    return [row for row, full in enumerate(response_mask.all(dim=-1).tolist()) if not full]


def empty_microbatches(update: Update, stop_token_id: int | None, pad_token_id: int) -> list[int]:
    """Micro-batches (by position in the update) whose response mask R is empty."""
    counts = [int(derive_masks(mb.responses, stop_token_id, pad_token_id)[0].sum()) for mb in update.micro_batches]
    return [m for m, count in enumerate(counts) if count == 0]


def map_rows(update: Update, stop_token_id: int | None = None, pad_token_id: int = 0) -> list[torch.Tensor]:
    """For each micro-batch, the rollout row of each of its rows (matched by response ids).

    Rows whose responses are identical (e.g. two responses that are just the stop
    token) are told apart within each epoch, where every rollout row runs exactly
    once: of all the ways to pair the identical rows of an epoch with their rollout
    rows, the one whose per-token log-probs and entropies (over the response mask)
    are nearest wins, when it is clearly nearer than the next best (half the total
    distance or less). Raises NotRecomputable when a row matches no rollout row or
    identical rows cannot be told apart.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for number, response in enumerate(update.responses().tolist()):
        groups.setdefault(tuple(response), []).append(number)
    places = []  # (micro-batch, row, candidates) in the order the rows ran
    for m, batch in enumerate(update.micro_batches):
        for row, response in enumerate(batch.responses.tolist()):
            candidates = groups.get(tuple(response))
            if candidates is None:
                raise NotRecomputable(f"update {update.index} micro-batch {m}: row {row} matches no rollout response")
            places.append((m, row, candidates))
    found: dict[tuple[int, int], int] = {(m, row): c[0] for m, row, c in places if len(c) == 1}
    ambiguous = [p for p in places if len(p[2]) > 1]
    if ambiguous:
        found.update(_pair_identical(update, places, ambiguous, stop_token_id, pad_token_id))
    return [
        torch.tensor([found[(m, row)] for row in range(batch.rows)], dtype=torch.long)
        for m, batch in enumerate(update.micro_batches)
    ]


def _pair_identical(update, places, ambiguous, stop_token_id, pad_token_id) -> dict[tuple[int, int], int]:
    """Pair each run of identical-response rows with rollout rows, one epoch at a time."""
    import itertools

    rollout_rows = sum(len(r.index) for r in update.rollout)
    position = {(m, row): i for i, (m, row, _) in enumerate(places)}
    entropy = _cat([r.entropy for r in update.rollout], "rollout 'logprob' entropies", update.index)
    old = update.old_logprobs()
    chosen: dict[tuple[int, int], int] = {}
    by_epoch_group: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = {}
    for m, row, candidates in ambiguous:
        by_epoch_group.setdefault((position[(m, row)] // rollout_rows, tuple(candidates)), []).append((m, row))
    for (epoch, candidates), spots in by_epoch_group.items():
        costs = {
            (spot, c): _distance(update.micro_batches[spot[0]], spot[1], c, entropy, old, stop_token_id, pad_token_id)
            for spot in spots
            for c in candidates
        }
        if all(cost == 0.0 for cost in costs.values()) or len(candidates) > 6 or len(spots) != len(candidates):
            totals = []  # nothing to choose between (or not a permutation): take them in order
            pairing = dict(zip(spots, candidates))
        else:
            totals = sorted(
                (sum(costs[(spot, c)] for spot, c in zip(spots, perm)), perm)
                for perm in itertools.permutations(candidates)
            )
            pairing = dict(zip(spots, totals[0][1]))
        if len(totals) > 1 and totals[0][0] > 0.5 * totals[1][0]:
            raise NotRecomputable(
                f"update {update.index} epoch {epoch}: rollout rows {list(candidates)} have identical responses, and "
                f"log-probs and entropies too close to tell apart ({totals[0][0]:.3g} vs {totals[1][0]:.3g})"
            )
        chosen.update(pairing)
    return chosen


def _distance(batch, row, candidate, entropy, old, stop_token_id, pad_token_id) -> float:
    """How far a micro-batch row's log-probs and entropies (over its response mask) are from a rollout row's."""
    response_mask, _ = derive_masks(batch.responses[row : row + 1], stop_token_id, pad_token_id)
    where = response_mask[0]
    if not where.any():
        return 0.0  # no response token: nothing the oracle computes depends on the pairing
    gap = (entropy[candidate][where] - batch.logprobs.entropy[row][where]).abs()
    gap = gap + (old[candidate][where] - batch.logprobs.logprobs[row][where]).abs()
    return gap.sum().item()


# ---------------------------------------------------------------------------- pooled means


@dataclass
class _Micro:
    """A micro-batch with the oracle's masks and (where the rows map) its old log-probs."""

    where: str
    batch: MicroBatch
    response_mask: torch.Tensor
    value_mask: torch.Tensor
    old: torch.Tensor | str
    """(rows, T) old log-probs, or why they are unknown."""


def _micros(updates: Sequence[Update], stop_token_id: int | None, pad_token_id: int) -> list[_Micro]:
    """Every micro-batch of `updates` (e.g. one update per rank), with masks and old log-probs."""
    micros = []
    for update in updates:
        try:
            mapping: list[torch.Tensor] | str = map_rows(update, stop_token_id, pad_token_id)
            old_all = update.old_logprobs()
        except NotRecomputable as why:
            mapping, old_all = str(why), None
        for m, batch in enumerate(update.micro_batches):
            response_mask, value_mask = derive_masks(batch.responses, stop_token_id, pad_token_id)
            old = mapping if isinstance(mapping, str) else old_all[mapping[m]]
            where = f"update {update.index} micro-batch {m}"
            micros.append(_Micro(where, batch, response_mask, value_mask, old))
    return micros


def _pool(name: str, micros: list[_Micro], per_token: Callable[[_Micro], torch.Tensor | str], mask: str) -> Expected:
    """sum over micro-batches of sum_{mask} per_token, divided once by the summed count."""
    if not micros:
        return Expected(name, None, "no training micro-batches were recorded (no 'new_logprobs' calls)")
    total, count = torch.zeros((), dtype=torch.float64), 0
    for micro in micros:
        active = micro.response_mask if mask == "R" else micro.value_mask
        values = per_token(micro)
        if isinstance(values, str):
            return Expected(name, None, f"{micro.where}: {values}")
        if values.shape != active.shape:
            return Expected(
                name,
                None,
                f"{micro.where}: values of shape {tuple(values.shape)} "
                f"do not match the {mask} mask of shape {tuple(active.shape)}",
            )
        total = total + torch.where(active, values, torch.zeros_like(values)).sum()
        count += int(active.sum())
    if count == 0:
        # nothing to average: a trainer logs 0 (not NaN) for a mean over no token; metrics.md is silent here
        return Expected(name, 0.0, f"no {mask}-active token in any micro-batch: logged as 0", count=0)
    return Expected(name, float(total / count), count=count)


def _site_values(role: str, scale: float) -> Callable[[_Micro], torch.Tensor | str]:
    """Per-token values handed to masked_mean at `role`, times `scale`."""

    def values(micro: _Micro) -> torch.Tensor | str:
        """The micro-batch's recorded values at `role`, scaled, or why there are none."""
        found = micro.batch.sites.get(role, [])
        if len(found) != 1:
            return f"{len(found)} masked_mean calls at site {role!r} (expected exactly one)"
        return scale * found[0].values

    return values


def _log_ratio(micro: _Micro) -> torch.Tensor | str:
    """logp_new - logp_old per token, or why the old log-probs are unknown."""
    if isinstance(micro.old, str):
        return micro.old
    new = micro.batch.logprobs.logprobs
    if new.shape != micro.old.shape:
        return f"new log-probs {tuple(new.shape)} and rollout log-probs {tuple(micro.old.shape)} differ in shape"
    return new - micro.old


def _apply(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[_Micro], torch.Tensor | str]:
    """Per-token `fn(logp_new - logp_old)` for a micro-batch."""

    def per_token(micro: _Micro) -> torch.Tensor | str:
        """`fn` of the log-ratio, or why the log-ratio is unknown."""
        diff = _log_ratio(micro)
        return diff if isinstance(diff, str) else fn(diff)

    return per_token


def _entropy(micro: _Micro) -> torch.Tensor:
    """Per-token entropy the spy computed from the micro-batch's logits."""
    return micro.batch.logprobs.entropy


def _ratio_var(micros: list[_Micro]) -> Expected:
    """Unbiased variance of per-micro-batch masked ratio means over micro-batches with |R| > 0."""
    name = "val/ratio_var"
    if not micros:
        return Expected(name, None, "no training micro-batches were recorded (no 'new_logprobs' calls)")
    means = []
    for micro in micros:
        diff = _log_ratio(micro)
        if isinstance(diff, str):
            return Expected(name, None, f"{micro.where}: {diff}")
        active = micro.response_mask
        if int(active.sum()) > 0:
            ratio = torch.where(active, diff.exp(), torch.zeros_like(diff))
            means.append(ratio.sum() / active.sum())
    if len(means) < 2:
        return Expected(name, 0.0, count=len(means))
    return Expected(name, float(torch.stack(means).var(correction=1)), count=len(means))


def pooled_metrics(updates: Sequence[Update], stop_token_id: int | None, pad_token_id: int) -> dict[str, Expected]:
    """The seven pooled means and val/ratio_var over all micro-batches of `updates`."""
    micros = _micros(updates, stop_token_id, pad_token_id)
    out = [
        _pool("loss/policy_avg", micros, _site_values("pg_loss", 1.0), "R"),
        _pool("policy/clipfrac_avg", micros, _site_values("pg_clipfrac", 1.0), "R"),
        _pool("loss/value_avg", micros, _site_values("vf_loss", 0.5), "V"),
        _pool("val/clipfrac_avg", micros, _site_values("vf_clipfrac", 1.0), "V"),
        _pool("policy/approxkl_avg", micros, _apply(lambda d: 0.5 * d.square()), "R"),
        _pool("policy/entropy_avg", micros, _entropy, "R"),
        _pool("val/ratio", micros, _apply(torch.exp), "R"),
        _ratio_var(micros),
    ]
    return {e.name: e for e in out}


# ---------------------------------------------------------------------------- rollout objectives


def _kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate: k1 = logp - ref, k3 = (r - 1) - log r with r = exp(ref - logp)."""
    log_r = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_r
    if estimator == "k3":
        return log_r.exp() - 1 - log_r
    raise HarnessConfigError(f"unknown kl_estimator {estimator!r}; expected 'k1' or 'k3'")


def _rollout_tensors(
    updates: Sequence[Update], stop_token_id: int | None, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | str]:
    """(R, logprobs, ref log-probs or why not) over all rollout rows of `updates`, in order."""
    if not updates:
        raise NotRecomputable("no update was given to the oracle")
    masks, logprobs, refs = [], [], []
    ref_problem = None
    for update in updates:
        responses = update.responses()
        masks.append(derive_masks(responses, stop_token_id, pad_token_id)[0])
        logprobs.append(update.old_logprobs())
        try:
            if not torch.equal(update.ref_responses(), responses):
                raise NotRecomputable(f"update {update.index}: 'ref_logprob' rows differ from 'logprob' rows")
            refs.append(update.ref_logprobs())
        except NotRecomputable as why:
            ref_problem = str(why)
    ref = ref_problem if ref_problem else torch.cat(refs)
    return torch.cat(masks), torch.cat(logprobs), ref


def _masked_row_sums(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row sums over the positions where `mask` holds (NaN elsewhere ignored)."""
    return torch.where(mask, values, torch.zeros_like(values)).sum(dim=-1)


def rollout_metrics(
    updates: Sequence[Update],
    stop_token_id: int | None,
    pad_token_id: int,
    kl_coef: float,
    kl_estimator: str,
    scores: Any = None,
) -> dict[str, Expected]:
    """objective/*: per-sample sums over R, averaged over every sample of `updates`."""
    try:
        mask, logprobs, ref = _rollout_tensors(updates, stop_token_id, pad_token_id)
    except NotRecomputable as why:
        return {name: Expected(name, None, str(why)) for name in ROLLOUT}
    samples = int(mask.shape[0])
    out = {"objective/entropy": Expected("objective/entropy", float(_masked_row_sums(-logprobs, mask).mean()))}
    if isinstance(ref, str):
        kl_mean = None
        out.update({n: Expected(n, None, ref) for n in ("objective/kl", "objective/non_score_reward")})
    else:
        kl_mean = float(_masked_row_sums(_kl(logprobs, ref, kl_estimator), mask).mean())
        out["objective/kl"] = Expected("objective/kl", kl_mean, count=samples)
        out["objective/non_score_reward"] = Expected("objective/non_score_reward", -kl_coef * kl_mean)
    out.update(_score_metrics(scores, samples, kl_mean, kl_coef))
    return out


def _score_metrics(scores: Any, samples: int, kl_mean: float | None, kl_coef: float) -> dict[str, Expected]:
    """objective/scores and objective/rlhf_reward, optional when no scores are given."""
    names = ("objective/scores", "objective/rlhf_reward")
    if scores is None:
        reason = "no scores were supplied to the oracle"
        return {n: Expected(n, None, reason, required=False) for n in names}
    values = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    if values.numel() != samples:
        reason = f"{values.numel()} scores were supplied for {samples} rollout samples"
        return {n: Expected(n, None, reason) for n in names}
    mean_score = float(values.mean())
    out = {"objective/scores": Expected("objective/scores", mean_score, count=samples)}
    if kl_mean is None:
        out["objective/rlhf_reward"] = Expected("objective/rlhf_reward", None, "objective/kl is unknown")
    else:
        out["objective/rlhf_reward"] = Expected("objective/rlhf_reward", mean_score - kl_coef * kl_mean)
    return out


def expected_metrics(
    update: Update | Sequence[Update],
    stop_token_id: int | None,
    pad_token_id: int,
    kl_coef: float,
    kl_estimator: str,
    scores: Any = None,
) -> dict[str, Expected]:
    """Every logged statistic the oracle can recompute for one update.

    `update` may be a list of the same update's records from several ranks: sums and
    counts then run over all of them. `scores` (one per rollout sample, in order) enables
    objective/scores and objective/rlhf_reward.
    """
    updates = [update] if isinstance(update, Update) else list(update)
    if kl_estimator not in ("k1", "k3"):
        raise HarnessConfigError(f"unknown kl_estimator {kl_estimator!r}; expected 'k1' or 'k3'")
    out = pooled_metrics(updates, stop_token_id, pad_token_id)
    out.update(rollout_metrics(updates, stop_token_id, pad_token_id, kl_coef, kl_estimator, scores))
    return out


# ---------------------------------------------------------------------------- mask checks


_ROLE_MASK = {"pg_loss": "R", "pg_clipfrac": "R", "vf_loss": "V", "vf_clipfrac": "V"}


def check_masks(update: Update, stop_token_id: int | None, pad_token_id: int) -> list[str]:
    """Where the masks the trainer passed to masked_mean differ from the oracle's R / V."""
    problems = [
        f"update {update.index}: masked_mean at site {r.site.name!r} ran before any 'new_logprobs' call"
        for r in update.stray
    ]
    for m, batch in enumerate(update.micro_batches):
        response_mask, value_mask = derive_masks(batch.responses, stop_token_id, pad_token_id)
        for role, records in batch.sites.items():
            kind = _ROLE_MASK[role]
            want = response_mask if kind == "R" else value_mask
            for record in records:
                problem = _mask_difference(record.mask, want)
                if problem:
                    problems.append(
                        f"update {update.index} micro-batch {m} site {role!r}: mask {problem} the oracle's {kind} mask"
                    )
    return problems


def _mask_difference(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """How `got` differs from `want` (a phrase ending in 'from'), or None when equal."""
    if got.shape != want.shape:
        return f"of shape {tuple(got.shape)} does not match the shape {tuple(want.shape)} of"
    wrong = (got != want).nonzero()
    if wrong.numel() == 0:
        return None
    row, t = wrong[0].tolist()
    return f"differs at {wrong.shape[0]} positions (first: row {row}, t={t}) from"


# ---------------------------------------------------------------------------- comparison


def _as_float(value: Any) -> float | None:
    """float(value), or None when it is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _result(name: str, want: Expected, status: str, reason: str, **values: float | None) -> MetricResult:
    """A MetricResult with the unspecified numbers left as None."""
    filled = {"logged": None, "expected": want.value, "abs_err": None, "rel_err": None, "tol": None}
    filled.update(values)
    return MetricResult(name=name, status=status, reason=reason, required=want.required, **filled)


def _compare_one(name: str, logged: Mapping[str, Any], want: Expected, tol: Tolerance, kind: str) -> MetricResult:
    """One metric's verdict; a missing or non-finite logged value is never a pass."""
    if name not in logged:
        return _result(name, want, "missing", f"{name} is not in the logged metrics")
    value = _as_float(logged[name])
    if value is None or not math.isfinite(value):
        return _result(name, want, "nan", f"logged value {logged[name]!r} is not a finite number", logged=value)
    expected = want.value
    if expected is None:
        return _result(name, want, "not_recomputable", want.reason or "no reason given", logged=value)
    if not math.isfinite(expected):
        return _result(name, want, "nan", f"the {kind} value {expected!r} is not finite", logged=value)
    gap = abs(value - expected)
    rel = gap / abs(expected) if expected != 0 else (0.0 if gap == 0 else math.inf)
    allowed = tol.allowed(expected)
    ok = close(value, expected, tol)
    reason = "" if ok else f"{kind}: gap {gap:.3g} exceeds tolerance {allowed:.3g}"
    errors = {"logged": value, "abs_err": gap, "rel_err": rel, "tol": allowed}
    return _result(name, want, "pass" if ok else "fail", reason, **errors)


def _as_expected(name: str, want: Any) -> Expected:
    """An `Expected` from an oracle entry or a plain number (identities, another run's log)."""
    if isinstance(want, Expected):
        return want
    value = _as_float(want)
    return Expected(name, value, None if value is not None else f"expected value {want!r} is not a number")


def compare(
    logged: Mapping[str, Any], expected: Mapping[str, Any], dtype: Any, kind: str = "oracle"
) -> list[MetricResult]:
    """Each expected metric (an `Expected` or a number) against the logged one.

    A metric missing from `logged`, or logged as NaN / inf, fails ("missing" / "nan").
    The tolerance is looked up by the part of the name before " @ ", so that names
    such as "val/ratio @ bs=2" use val/ratio's row. `kind` labels the reference in reasons.
    """
    results = []
    for name, want in expected.items():
        tol = tolerance(name.split(" @ ")[0], dtype)
        results.append(_compare_one(name, logged, _as_expected(name, want), tol, kind))
    return results
