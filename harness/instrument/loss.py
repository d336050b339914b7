"""The frozen records of a GRPO run: one `LossRecord` per micro-batch of its loss, one `RewardCall` per call of a
reward function it handed its trainer (docs/architecture.md, "Targets").

A target makes them with `LossRecorder` (loss_recorder.py) and `RewardTap` (reward_calls.py), whose
tensors are detached CPU copies: float64 for values, bool for masks, int64 for ids. A target written
without them may hand dicts with the same keys instead; `loss_records` and `reward_calls` turn those
into records when the observation is made, and a dict that lacks a required key or carries a key the
record does not have is a HarnessConfigError (exit 2) naming the key and the record type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from harness.errors import HarnessConfigError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LogitGapRecord:
    """The largest absolute gaps in one micro-batch between the log-probs and entropies the trainer's functions
    returned (`selective_log_softmax` and `entropy_from_logits`, one joint `selective_log_softmax_and_entropy`, or
    a fused LM head: loss_recorder.py's kinds) and float64 recomputations from what each was given (the logits,
    or the head's hidden states, weight and bias; logits.py); None for a quantity no recorded function computed."""

    logps: float | None = None
    entropies: float | None = None


@dataclass(frozen=True, eq=False)
class LossRecord:
    """One micro-batch of a GRPO trainer's loss, as the loss was fed it, in the order the micro-batches ran.

    (B, T): B completions (rows), T the completion positions of the micro-batch.
    """

    generation: int
    """Index of the generation batch the rows come from, 0-based over the run (on this rank)."""
    window: int
    """Index of the optimizer step (accumulation window) the micro-batch belongs to, 0-based over the run."""
    rank: int
    """The data-parallel rank that ran it."""
    completion_mask: torch.Tensor
    """(B, T) bool: the mask the loss uses."""
    logps: torch.Tensor | None
    """(B, T): log-probs of the current policy, as the loss used them (None only in a broken record)."""
    old_logps: torch.Tensor | None
    """(B, T): the old policy's log-probs; None on-policy (every ratio 1)."""
    ref_logps: torch.Tensor | None
    """(B, T): the reference policy's log-probs; None when beta is 0."""
    advantages: torch.Tensor
    """(B,): each row's advantage, as the loss used it."""
    entropies: torch.Tensor | None
    """(B, T): per-token entropies, as the trainer computed them (None: not computed)."""
    logit_gaps: LogitGapRecord | None = None
    """The gaps of the log-probs and entropies to their float64 formulas (`logit_recompute` fails without them)."""
    logp_grad: torch.Tensor | None = None
    """(B, T): the gradient the micro-batch's backward pass delivered to `logps` (`logp_gradient` fails
    without it)."""
    completions: torch.Tensor | None = None
    """(B,) int64: which completion of its generation batch, on its rank, each row is (the reward and length
    checks are not recomputable without it)."""
    completion_ids: torch.Tensor | None = None
    """(B, T) int64: the rows' token ids (the length check is not recomputable without them)."""
    held: Mapping[str, str] | None = None
    """The dtype the trainer held each tensor field in, by name ('float32', 'bfloat16'), before the recorder's
    float64 copy: what the tolerances are derived from (harness/oracle/precision.py). None: the tensors' own
    dtypes say it (a record made from a target's dict keeps the target's tensors)."""
    old_entropies: torch.Tensor | None = None
    """(B, T): the same rows' per-token entropies from the forward pass that computed their generation's old
    log-probs, before its first optimizer step, where the trainer computes them there (None: not recorded). What a
    target whose logged entropy comes from that pass (GRPO's `entropy_pass`) is recomputed from."""
    entropy_grad: torch.Tensor | None = None
    """(B, T): the gradient the micro-batch's backward pass delivered to `entropies`, where the loss was built from
    them (an entropy bonus; None: not recorded, or no gradient reached them)."""

    DTYPES: ClassVar[Mapping[str, str]] = {
        "completion_mask": "bool", "logps": "float64", "old_logps": "float64", "ref_logps": "float64",
        "advantages": "float64", "entropies": "float64", "logp_grad": "float64", "completions": "int64",
        "completion_ids": "int64", "old_entropies": "float64", "entropy_grad": "float64",
    }  # fmt: skip
    """The dtype of each tensor field in a record the harness's recorder makes."""

    def held_dtype(self, name: str) -> str | None:
        """The dtype the trainer held tensor field `name` in (`held`, else the tensor's own); None without it."""
        if self.held and name in self.held:
            return str(self.held[name])
        value = getattr(self, name)
        dtype = getattr(value, "dtype", None)
        return None if dtype is None else str(dtype).removeprefix("torch.")


@dataclass(frozen=True, eq=False)
class RewardCall:
    """One call of a reward function the run handed its trainer: its score of each completion it was given."""

    generation: int
    """The generation batch being scored, 0-based over the run (on this rank)."""
    rank: int
    function: str
    """The function's name, as the trainer logs it."""
    index: int
    """Its place among the trainer's reward functions (that of its weight)."""
    scores: torch.Tensor
    """(N,) float64: its score of each completion, NaN where it could not score; rows in the order of that rank's
    generation batch, which a loss record's `completions` index."""
    completion_ids: tuple[tuple[int, ...], ...] | None = None
    """The token ids of each completion the function was given, in its rows' order (None: not recorded; the
    `reward_inputs` check is not recomputable without them)."""
    head: torch.Tensor | None = None
    """For a reward model (`RewardTap.watch`): (N, L) float64, its scalar head's output at every position of each
    row it was given; its `scores` are then NaN, the oracle's to read from here (which position is the score is
    the contract's: algorithms/grpo/oracle/reward_model.py). None for a reward function."""
    input_ids: torch.Tensor | None = None
    """For a reward model: (N, L) int64, the ids of each row it was given (prompt and completion), a position its
    attention mask leaves out read as pad. None for a reward function."""
    special_ids: tuple[int, ...] = ()
    """For a reward model scored on decoded text: the token ids the decoding leaves out (its tokenizer's special
    tokens), which the rows it scored may lack where the completion had them."""
    prompt_ids: tuple[tuple[int, ...], ...] | None = None
    """The token ids of the prompt the function was given beside each completion, in its rows' order (None: not
    recorded; () when the function was given no prompts at all)."""


def required(record_type: type) -> tuple[str, ...]:
    """The fields of `record_type` a record must be given (those without a default)."""
    return tuple(f.name for f in fields(record_type) if f.default is MISSING and f.default_factory is MISSING)


def from_mapping(record_type: type, values: Mapping[str, Any], where: str) -> Any:
    """A `record_type` of a dict with its field names as keys; HarnessConfigError naming a missing or an unknown
    key, or an integer field that is not an integer. `where` says which entry of the run it is."""
    names = [f.name for f in fields(record_type)]
    unknown = [k for k in values if k not in names]
    if unknown:
        raise HarnessConfigError(f"{where}: {record_type.__name__} has no field {unknown[0]!r} "
                                 f"(its fields: {', '.join(names)}; docs/architecture.md)")  # fmt: skip
    missing = [k for k in required(record_type) if k not in values]
    if missing:
        raise HarnessConfigError(f"{where}: {record_type.__name__} lacks the required key {missing[0]!r} "
                                 f"(required: {', '.join(required(record_type))}; docs/architecture.md)")  # fmt: skip
    given = dict(values)
    for f in fields(record_type):
        if f.type == "int" and f.name in given:
            given[f.name] = _integer(given[f.name], f"{where}: {record_type.__name__}.{f.name}")
        elif f.type == "str" and f.name in given:
            given[f.name] = str(given[f.name])
    if "logit_gaps" in given:
        given["logit_gaps"] = _gaps(given["logit_gaps"], f"{where}: {record_type.__name__}.logit_gaps")
    return record_type(**given)


def _integer(value: Any, where: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, RuntimeError):
        number = None
    if number is None or number != value:
        raise HarnessConfigError(f"{where} is {value!r}, not an integer")
    return number


def _gaps(value: Any, where: str) -> LogitGapRecord | None:
    if value is None or isinstance(value, LogitGapRecord):
        return value
    names = [f.name for f in fields(LogitGapRecord)]
    if not isinstance(value, Mapping) or any(k not in names for k in value):
        raise HarnessConfigError(f"{where} is {value!r}: a mapping with the keys {', '.join(names)} (or None)")
    return LogitGapRecord(**value)


def _records(items: Iterable[Any] | None, record_type: type, member: str) -> tuple | None:
    if items is None:
        return None
    out = []
    for i, item in enumerate(items):
        if isinstance(item, record_type):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(from_mapping(record_type, item, f"{member}[{i}]"))
        else:
            raise HarnessConfigError(f"{member}[{i}] is a {type(item).__name__}, not a {record_type.__name__} or "
                                     f"a dict")  # fmt: skip
    return tuple(out)


def loss_records(items: Iterable[Any] | None) -> tuple[LossRecord, ...] | None:
    """A run's `loss_inputs` as records (dicts converted); None when the run has none."""
    return _records(items, LossRecord, "loss_inputs")


def reward_calls(items: Iterable[Any] | None) -> tuple[RewardCall, ...] | None:
    """A run's `reward_calls` as records (dicts converted); None when the run has none."""
    return _records(items, RewardCall, "reward_calls")
