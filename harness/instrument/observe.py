"""Run a target for one spec under every instrument, once, and keep what was seen as a frozen `Observation`.

A target is `factory(spec) -> TargetRun`; `TargetRun` below is the protocol a run satisfies,
checked member by member when the run is built (docs/architecture.md). A run that raises
becomes a `Crashed` outcome, so that every check that reads it fails, naming what it raised;
a `HarnessConfigError` is a usage error instead (exit 2).

The gradient recorder keeps each optimizer step's `.grad` copy only for the runs a check asks
for inside `grad_copies()`: every other run keeps the steps' summaries alone, and reading a
copy from it raises (`harness.instrument.grad_trace.GradCopiesNotKept`), which fails the check. Those
runs are recorded with a tracking gradient recorder where the spec allows (`tracks`), and again
with a summing one where the trainer's own writes to `.grad` lost the tracked sums (grad.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness.errors import HarnessConfigError

from . import loss
from .grad import GradTrace

if TYPE_CHECKING:
    import torch

    from .loss import LossRecord, RewardCall
    from .records import Record


@runtime_checkable
class TargetRun(Protocol):
    """One built trainer run, as a target's factory returns it."""

    module: types.ModuleType
    """Where the spied functions live; the trainer must look them up there at call time."""
    optimizer: torch.optim.Optimizer
    """The underlying torch optimizer (the gradient recorder hooks its steps)."""
    params: list[torch.nn.Parameter]
    """Trainable parameters (policy and value)."""
    pad_token_id: int
    stop_token_id: int

    def train(self) -> list[dict[str, float]]:
        """Run every update; one dict of logged metrics per update."""
        ...

    # A run may also have `scores` (the scores handed to the trainer, one tensor per rollout; without them the
    # score objectives are reported not recomputable), `site_map` (its own names for the call sites) and
    # `value_head` (the value model's head module, whose output per position the harness records; without it
    # the value side of the training signal is reported not recomputable), `models` (a mapping "policy",
    # "ref_policy", "value_model" -> the modules the run handed its trainer; observe() keeps a float64 CPU copy of
    # each, made before training, for the forward recompute) and `prompts` (the (N, P) prompts handed to the
    # trainer, left-padded with pad_token_id; without `models` and `prompts` the recompute is not recomputable), and
    # `reward_model` (its reward model, a sequence-classification model whose head output per position and input
    # ids the harness records; the oracle reads each row's score there instead of taking `scores` on trust), and
    # for a reward on decoded text `scored_texts` (per rollout, the (prompts, responses) strings the reward was
    # given) with `tokenizer` (what the oracle decodes the rollout's token ids with to check those strings).
    # A GRPO run also has `loss_inputs`: one LossRecord (or dict with its fields) per micro-batch of its loss,
    # and may have `reward_calls`: one RewardCall (or dict) per call of a reward function it handed its trainer
    # (harness/instrument/loss.py, docs/architecture.md).


def missing_members(run: Any) -> list[str]:
    """The members of `TargetRun` that `run` lacks (empty when it satisfies the protocol)."""
    members = [*TargetRun.__annotations__, "train"]
    return [name for name in members if not hasattr(run, name)]


class RunSpec(Protocol, Hashable):
    """What observe needs of a spec: it is hashable (the cache key) and validates its own geometry."""

    def validate(self) -> None:
        """Raise HarnessConfigError for settings no trainer can run."""
        ...


@dataclass(frozen=True)
class Ran:
    """A run that finished: what it logged, what the spy recorded, what the gradient recorder saw."""

    logs: tuple[dict[str, float], ...]
    records: tuple[Record, ...]
    grads: GradTrace
    pad_token_id: int
    stop_token_id: int
    scores: tuple[torch.Tensor, ...] | None = None
    sites: Any = None
    """The run's site map (its names for the call sites), or None for the algorithm's default."""
    loss_inputs: tuple[LossRecord, ...] | None = None
    """What a GRPO run recorded of each micro-batch of its loss (None: the run records none)."""
    reward_calls: tuple[RewardCall, ...] | None = None
    """What a GRPO run recorded at each call of its reward functions (None: the run records none)."""
    networks: Any = None
    """Float64 CPU copies of the run's `models`, taken before training (None: the run exposes none)."""
    prompts: torch.Tensor | None = None
    """The prompts the run was given, (N, P) int64 on the CPU (None: the run exposes none)."""
    reward_model: bool = False
    """The run exposed its reward model: the scores are the oracle's, from the reward-head records."""
    scored_texts: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] | None = None
    """Per rollout, the (prompts, responses) strings a reward on text was given (None: the run shows none)."""
    tokenizer: Any = None
    """The tokenizer the oracle decodes the rollout with to check `scored_texts` (None: the run shows none)."""


@dataclass(frozen=True)
class Crashed:
    """A run whose trainer raised: what it raised, on one line."""

    reason: str


@dataclass(frozen=True, eq=False)
class Observation:
    """The outcome of one instrumented run of a target for `spec` (compared by identity)."""

    spec: Any
    outcome: Ran | Crashed
    _views: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """An algorithm's views of the finished run, each built once (`view`)."""

    def view(self, name: str, build: Callable[[Ran], Any]) -> Any:
        """The view `name` of the finished run, `build(ran)` the first time it is asked for (ValueError if it
        crashed: a crashed run has no view)."""
        if self.ran is None:
            raise ValueError("a crashed run has no view")
        if name not in self._views:
            self._views[name] = build(self.ran)
        return self._views[name]

    @property
    def ran(self) -> Ran | None:
        """The finished run, or None when the trainer raised."""
        return self.outcome if isinstance(self.outcome, Ran) else None

    @property
    def error(self) -> str | None:
        """What the trainer raised, or None when it finished."""
        return self.outcome.reason if isinstance(self.outcome, Crashed) else None


def build_run(factory: Callable, spec: RunSpec) -> TargetRun:
    """The target's run for `spec`, after checking it satisfies `TargetRun` (HarnessConfigError if not)."""
    spec.validate()
    run = factory(spec)
    missing = missing_members(run)
    if missing:
        listed = ", ".join(repr(m) for m in missing)
        raise HarnessConfigError(f"target run {type(run).__name__} lacks {listed} (see docs/architecture.md)")
    return run


def pristine_networks(run: Any) -> dict | None:
    """Float64 CPU copies of `run.models`, in eval mode and frozen, so nothing the trainer does later reaches them."""
    import copy

    import torch

    models = getattr(run, "models", None)
    if models is None:
        return None
    copies = {}
    for name, module in dict(models).items():
        twin = copy.deepcopy(module).to(device="cpu", dtype=torch.float64).eval()
        copies[name] = twin.requires_grad_(False)
    return copies


_GRAD_COPIES: contextvars.ContextVar[bool] = contextvars.ContextVar("grad_copies", default=False)


@contextlib.contextmanager
def grad_copies() -> Iterator[None]:
    """Inside the block, the runs an `ObservationCache` makes keep every optimizer step's `.grad` copy.

    A check that reads `Step.grad` or `Step.local_grad` gets its runs here; the copies are a model-sized
    tensor per step that no other check reads, so no other run keeps them.
    """
    token = _GRAD_COPIES.set(True)
    try:
        yield
    finally:
        _GRAD_COPIES.reset(token)


def tracks(spec: Any, copies: bool) -> bool:
    """Whether `observe` first records `spec` with a tracking gradient recorder (grad.py): without the copies,
    and where the spec asks for no clipping (clipping writes `.grad` in place at every step, which loses the
    tracked sums: such a run would be made twice), outside a process group (data parallelism writes `.grad`)."""
    import torch.distributed as dist

    clipped = getattr(spec, "max_grad_norm", None) is not None
    return not copies and not clipped and not (dist.is_available() and dist.is_initialized())


@contextlib.contextmanager
def instrumented(
    run: TargetRun, spy: bool = True, copies: bool = False, track: bool = False
) -> Iterator[tuple[Any, Any]]:
    """Every instrument `observe` trains `run` under, installed for the block: (the Spy or None, the GradRecorder).

    Under the spy, also the value head's and the reward model's recorders where the run exposes them;
    `copies`: the recorder keeps each step's `.grad` copy; `track`: it proves `.grad` the contributions' sum
    instead of summing them, where it can (grad.py).
    """
    from .grad import GradRecorder
    from .rewards import RewardRecorder
    from .spy import Spy
    from .values import ValueRecorder

    if not spy:
        with GradRecorder(run.params, run.optimizer, copies=copies, track=track) as grads:
            yield None, grads
        return
    head, reward_model = getattr(run, "value_head", None), getattr(run, "reward_model", None)
    with (
        Spy(run.module) as watcher,
        ValueRecorder(head, watcher) if head is not None else contextlib.nullcontext(),
        RewardRecorder(reward_model, watcher) if reward_model is not None else contextlib.nullcontext(),
        GradRecorder(run.params, run.optimizer, lambda: len(watcher.records), copies=copies, track=track) as grads,
    ):
        yield watcher, grads


def observe(
    factory: Callable, spec: RunSpec, spy: bool = True, copies: bool = False, track: bool | None = None
) -> Observation:
    """Build the target's run for `spec` and train it under the spy (when asked) and the gradient recorder,
    which keeps each step's `.grad` copy when `copies` is set.

    `track` (default: `tracks(spec, copies)`): first with a tracking recorder; where the trainer wrote `.grad`
    itself and so lost the tracked sums, the run is built and trained again with a summing one (the same seed,
    the same run: only the second is kept)."""
    import torch

    from .grad import GradTrackingLost

    if track is None:
        track = tracks(spec, copies)

    run = build_run(factory, spec)
    networks = pristine_networks(run)
    prompts = getattr(run, "prompts", None)
    prompts = prompts.detach().to("cpu").long().clone() if isinstance(prompts, torch.Tensor) else None
    reward_model = getattr(run, "reward_model", None) if spy else None
    with instrumented(run, spy, copies, track) as (watcher, grads):
        logs = run.train()
    try:
        trace = grads.trace()
    except GradTrackingLost:
        return observe(factory, spec, spy, copies, track=False)
    records = tuple(watcher.finished()) if spy else ()
    scores = getattr(run, "scores", None)
    outcome = Ran(
        logs=tuple(logs),
        records=records,
        grads=trace,
        pad_token_id=run.pad_token_id,
        stop_token_id=run.stop_token_id,
        scores=None if scores is None else tuple(scores),
        sites=getattr(run, "site_map", None),
        loss_inputs=loss.loss_records(getattr(run, "loss_inputs", None)),
        reward_calls=loss.reward_calls(getattr(run, "reward_calls", None)),
        networks=networks,
        prompts=prompts,
        reward_model=reward_model is not None,
        **_texts(run),
    )
    return Observation(spec, outcome)


def _texts(run: Any) -> dict:
    """The strings a run's reward on text was given, and the tokenizer to decode the rollout with (or nothing)."""
    seen = getattr(run, "scored_texts", None)
    if seen is None:
        return {}
    texts = tuple((tuple(prompts), tuple(responses)) for prompts, responses in seen)
    return {"scored_texts": texts, "tokenizer": getattr(run, "tokenizer", None)}


class ObservationCache:
    """Session-wide cache: each (target, spec) runs once however many checks read it."""

    def __init__(self, factory: Callable) -> None:
        self.factory = factory
        self._seen: dict[tuple[Hashable, bool, bool], Observation] = {}

    def clear(self) -> None:
        """Forget every observation (mutmut links tests to code only when each test runs its trainer)."""
        self._seen.clear()

    def get(self, spec: RunSpec, spy: bool = True) -> Observation:
        """The observation of `spec`, with the steps' `.grad` copies when asked for inside `grad_copies()`.

        A spied run also serves a request without the spy, and a run with the copies one without them; a
        request for the copies that only a run without them could serve runs the spec again.
        """
        copies = _GRAD_COPIES.get()
        for seen in ((spec, s, c) for s in (True, spy) for c in (True, copies)):  # the most instrumented first
            if seen in self._seen:
                return self._seen[seen]
        key = (spec, spy, copies)
        try:
            self._seen[key] = observe(self.factory, spec, spy=spy, copies=copies)
        except HarnessConfigError:
            raise
        except Exception as exc:  # a trainer that crashes fails every check of this run, loudly
            why = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
            self._seen[key] = Observation(spec, Crashed(why))
        return self._seen[key]
