"""Records -> a view of each update: micro-batches, rows paired with rollout rows, masks derived once.

The stage between the spy and the expectations. Records (in call order) are grouped into
updates: a `logprob` record (or a rollout value-head record, or a reward-head record) that
follows a `new_logprobs` record starts a new update, and so does a mark; each `new_logprobs` record starts a
micro-batch, and the micro-batch-site masked_mean records after it belong to it. Each
micro-batch then gets its masks R and V (from its own response ids) and its rows' old
log-probs (through the row pairing), once. Value-head and reward-head records are kept with
the update's other records (`ignored`); `values.py` and `scores.py` pair them with rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from harness.errors import NotRecomputable
from harness.instrument.observe import Observation, Ran
from harness.instrument.records import LogProbCall, Mark, MaskedMeanCall, Record, RewardHeadCall, ValueHeadCall
from harness.oracle.masks import derive_masks, mask_difference
from harness.oracle.pairing import Rows, map_rows

from .contract import MICRO_BATCH_ROLES, ROLE_MASK, Mask, SiteMap
from .instruments import recorded


@dataclass(frozen=True)
class MicroBatchView:
    """One training micro-batch: its `new_logprobs` record, its masked_mean records, its masks and old log-probs."""

    where: str
    record: LogProbCall
    sites: Mapping[str, tuple[MaskedMeanCall, ...]]
    response_mask: torch.Tensor = field(repr=False)
    value_mask: torch.Tensor = field(repr=False)
    old_logprobs: torch.Tensor | None = field(repr=False)
    old_problem: str | None = None
    """Why the rollout log-probs of these rows are unknown (rows not paired, no rollout records)."""
    rollout_rows: torch.Tensor | None = field(repr=False, default=None)
    """The rollout row of each of these rows (None when they could not be paired)."""

    @property
    def responses(self) -> torch.Tensor:
        """(rows, T) response token ids."""
        return self.record.index

    @property
    def rows(self) -> int:
        """Number of rows."""
        return int(self.responses.shape[0])

    def mask(self, kind: Mask) -> torch.Tensor:
        """The oracle's R or V mask of this micro-batch."""
        return self.response_mask if kind == "R" else self.value_mask

    def log_ratio(self) -> torch.Tensor:
        """logp_new - logp_old per token; NotRecomputable when the old log-probs are unknown."""
        if self.old_logprobs is None:
            raise NotRecomputable(f"{self.where}: {self.old_problem}")
        new = self.record.logprobs
        if new.shape != self.old_logprobs.shape:
            raise NotRecomputable(
                f"{self.where}: new log-probs {tuple(new.shape)} and rollout log-probs "
                f"{tuple(self.old_logprobs.shape)} differ in shape"
            )
        return new - self.old_logprobs

    def site_values(self, role: str) -> torch.Tensor:
        """The per-token values handed to masked_mean at `role`; NotRecomputable unless it was called once."""
        found = self.sites.get(role, ())
        if len(found) != 1:
            raise NotRecomputable(
                f"{self.where}: {len(found)} masked_mean calls at site {role!r} (expected exactly one)"
            )
        return found[0].values


@dataclass(frozen=True)
class RolloutView:
    """The rollout rows of one update, in order: responses, old and reference log-probs, entropies, masks."""

    responses: torch.Tensor = field(repr=False)
    logprobs: torch.Tensor = field(repr=False)
    entropy: torch.Tensor = field(repr=False)
    response_mask: torch.Tensor = field(repr=False)
    value_mask: torch.Tensor = field(repr=False)
    ref_logprobs: torch.Tensor | None = field(repr=False)
    ref_problem: str | None = None
    has_stop: torch.Tensor | None = field(repr=False, default=None)
    """(N,) whether each response contains the stop token (None when the trainer has no stop token)."""
    logprob_variance: torch.Tensor | None = field(repr=False, default=None)
    """(N, T) variance of the log-prob under the rollout's distribution at each position (None if not recorded)."""

    @property
    def samples(self) -> int:
        """Number of rollout rows."""
        return int(self.responses.shape[0])


@dataclass(frozen=True)
class UpdateView:
    """One rollout + optimisation round as the oracle sees it."""

    index: int
    start_seq: int | None
    rollout: RolloutView | None
    rollout_problem: str | None
    micro_batches: tuple[MicroBatchView, ...]
    stray: tuple[MaskedMeanCall, ...] = ()
    """Micro-batch-site records seen before any `new_logprobs` record of this update."""
    ignored: tuple[Record, ...] = ()
    """Records at other sites (e.g. inside masked_whiten)."""
    whitening: tuple[MaskedMeanCall, ...] = ()
    """The whitening function's masked_mean calls before the first micro-batch (raw rewards, raw advantages)."""

    @property
    def geometry(self) -> list[int]:
        """Rows of each micro-batch in the order they ran, e.g. [4, 2, 4, 2]."""
        return [mb.rows for mb in self.micro_batches]

    def padded_rows(self) -> list[int]:
        """Rollout rows whose response mask R stops before the last position (they carry padding)."""
        if self.rollout is None:
            return []
        return [row for row, full in enumerate(self.rollout.response_mask.all(dim=-1).tolist()) if not full]

    def empty_micro_batches(self) -> list[int]:
        """Micro-batches (by position in the update) whose response mask R is empty."""
        return [m for m, mb in enumerate(self.micro_batches) if not mb.response_mask.any()]

    def mask_problems(self) -> list[str]:
        """Where the masks the trainer passed to masked_mean differ from the oracle's R / V."""
        problems = [
            f"update {self.index}: masked_mean at site {r.site.name!r} ran before any 'new_logprobs' call"
            for r in self.stray
        ]
        for m, batch in enumerate(self.micro_batches):
            for role, records in batch.sites.items():
                kind = ROLE_MASK[role]
                for record in records:
                    problem = mask_difference(record.mask, batch.mask(kind))
                    if problem:
                        where = f"update {self.index} micro-batch {m} site {role!r}"
                        problems.append(f"{where}: mask {problem} the oracle's {kind} mask")
        return problems


@dataclass(frozen=True)
class RunView:
    """Every update of one run, and where in the records each one began (the gradient recorder's clock)."""

    updates: tuple[UpdateView, ...]
    starts: tuple[int, ...]

    def update_at(self, clock: int) -> int:
        """The update an event belongs to, given how many records were made before it.

        An event at the position where an update's first record lands happened before that update began.
        """
        return sum(1 for start in self.starts[1:] if start < clock)


# ---------------------------------------------------------------------------- grouping


@dataclass
class _Group:
    """The records of one update while they are being sorted out (mutable; becomes an UpdateView)."""

    start_seq: int | None = None
    rollout: list[LogProbCall] = field(default_factory=list)
    ref: list[LogProbCall] = field(default_factory=list)
    micro_batches: list[tuple[LogProbCall, dict[str, list[MaskedMeanCall]]]] = field(default_factory=list)
    stray: list[MaskedMeanCall] = field(default_factory=list)
    ignored: list[Record] = field(default_factory=list)

    def is_empty(self) -> bool:
        """True when no record was filed here."""
        return not (self.rollout or self.ref or self.micro_batches or self.stray or self.ignored)

    def add(self, record: Record, role: str | None) -> None:
        """File `record` under its role."""
        if role == "logprob":
            self.rollout.append(record)
        elif role == "ref_logprob":
            self.ref.append(record)
        elif role == "new_logprobs":
            self.micro_batches.append((record, {}))
        elif role in MICRO_BATCH_ROLES and self.micro_batches:
            self.micro_batches[-1][1].setdefault(role, []).append(record)
        elif role in MICRO_BATCH_ROLES:
            self.stray.append(record)
        else:
            self.ignored.append(record)


def group_updates(records: Sequence[Record], sites: SiteMap) -> list[_Group]:
    """Records, sorted by call order, grouped into updates (see the module docstring)."""
    groups: list[_Group] = []
    current = _Group()
    for record in sorted(records, key=lambda r: r.seq):
        role = sites.role(record)
        is_mark = isinstance(record, Mark)
        rollout_side = (
            role == "logprob"
            or (isinstance(record, ValueHeadCall) and not record.grad)
            or isinstance(record, RewardHeadCall)
        )
        if is_mark or (rollout_side and current.micro_batches):
            if not current.is_empty():
                groups.append(current)
            current = _Group(start_seq=record.seq)
            if is_mark:
                continue
        if current.start_seq is None:
            current.start_seq = record.seq
        current.add(record, role)
    if not current.is_empty():
        groups.append(current)
    return groups


# ---------------------------------------------------------------------------- the view of one update


def _cat(parts: list[torch.Tensor], what: str, index: int) -> torch.Tensor:
    """Concatenate recorded row blocks; NotRecomputable when there are none or their widths differ."""
    if not parts:
        raise NotRecomputable(f"update {index}: no {what} were recorded")
    widths = {tuple(p.shape[1:]) for p in parts}
    if len(widths) != 1:
        raise NotRecomputable(f"update {index}: {what} have different shapes {sorted(widths)}")
    return torch.cat(parts)


def _rollout(group: _Group, index: int, stop: int | None, pad: int) -> RolloutView:
    """The rollout rows of `group`; NotRecomputable without rollout `logprob` records."""
    responses = _cat([r.index for r in group.rollout], "rollout 'logprob' responses", index)
    logprobs = _cat([r.logprobs for r in group.rollout], "rollout 'logprob' log-probs", index)
    entropy = _cat([r.entropy for r in group.rollout], "rollout 'logprob' entropies", index)
    response_mask, value_mask = derive_masks(responses, stop, pad)
    ref, ref_problem = None, None
    try:
        if not torch.equal(_cat([r.index for r in group.ref], "rollout 'ref_logprob' responses", index), responses):
            raise NotRecomputable(f"update {index}: 'ref_logprob' rows differ from 'logprob' rows")
        ref = _cat([r.logprobs for r in group.ref], "rollout 'ref_logprob' log-probs", index)
    except NotRecomputable as why:
        ref_problem = str(why)
    has_stop = None if stop is None else (responses == stop).any(dim=-1)
    spreads = [r.logprob_variance for r in group.rollout]
    spread = None if any(v is None for v in spreads) else _cat(spreads, "rollout log-prob variances", index)
    return RolloutView(responses, logprobs, entropy, response_mask, value_mask, ref, ref_problem, has_stop, spread)


def view_update(group: _Group, index: int, stop: int | None, pad: int, sites: SiteMap | None = None) -> UpdateView:
    """One update's view: rollout, micro-batches with masks (derived once) and paired old log-probs."""
    try:
        rollout, rollout_problem = _rollout(group, index, stop, pad), None
    except NotRecomputable as why:
        rollout, rollout_problem = None, str(why)
    masks = [derive_masks(record.index, stop, pad) for record, _ in group.micro_batches]
    olds: list[torch.Tensor | None] = [None] * len(masks)
    paired: list[torch.Tensor | None] = [None] * len(masks)
    old_problem = rollout_problem
    if rollout is not None:
        batch_rows = [Rows(r.index, r.logprobs, r.entropy, m[0]) for (r, _), m in zip(group.micro_batches, masks)]
        whole = Rows(rollout.responses, rollout.logprobs, rollout.entropy, rollout.response_mask)
        try:
            paired = list(map_rows(whole, batch_rows, f"update {index}"))
            olds = [rollout.logprobs[rows] for rows in paired]
        except NotRecomputable as why:
            old_problem = str(why)
    micro_batches = tuple(
        MicroBatchView(
            where=f"update {index} micro-batch {m}",
            record=record,
            sites={role: tuple(found) for role, found in sites.items()},
            response_mask=response_mask,
            value_mask=value_mask,
            old_logprobs=old,
            old_problem=None if old is not None else old_problem,
            rollout_rows=rows,
        )
        for m, ((record, sites), (response_mask, value_mask), old, rows) in enumerate(
            zip(group.micro_batches, masks, olds, paired)
        )
    )
    first = group.micro_batches[0][0].seq if group.micro_batches else float("inf")
    whitening = tuple(r for r in group.ignored if (sites or SiteMap()).whitens(r) and r.seq < first)
    return UpdateView(index, group.start_seq, rollout, rollout_problem, micro_batches, tuple(group.stray),
                      tuple(group.ignored), whitening)  # fmt: skip


def build_view(records: Sequence[Record], stop: int | None, pad: int, sites: SiteMap | None = None) -> RunView:
    """The view of a run's records (in call order as given; `seq` orders the grouping)."""
    sites = sites or SiteMap()
    groups = group_updates(records, sites)
    position = {record.seq: i for i, record in enumerate(records)}
    updates = tuple(view_update(group, i, stop, pad, sites) for i, group in enumerate(groups))
    starts = tuple(position[u.start_seq] for u in updates if u.start_seq in position)
    return RunView(updates, starts)


def run_view(ran: Ran) -> RunView:
    """The view of a finished run's records, as its PPO record (`instruments.recorded`) has them."""
    seen = recorded(ran)
    return build_view(seen.records, ran.stop_token_id, ran.pad_token_id, seen.sites)


def view_of(obs: Observation) -> RunView:
    """The view of a finished observation's records, built once however many checks read it."""
    return obs.view("ppo", run_view)
