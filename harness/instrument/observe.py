"""Run a target for one spec under every instrument, once, and keep what was seen as a frozen `Observation`.

A target is `factory(spec) -> TargetRun`; `TargetRun` below is the protocol a run satisfies,
checked member by member when the run is built (docs/architecture.md). A run that raises
becomes a `Crashed` outcome, so that every check that reads it fails, naming what it raised;
a `HarnessConfigError` is a usage error instead (exit 2).

Nothing here knows an algorithm. The spec's `instruments` (its algorithm's declaration,
`Instruments` below) say which recorders are installed around the run besides the gradient
recorder, and make of what they saw the algorithm's own frozen record, `Ran.payload`, which
only that algorithm's code reads.

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
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from harness.errors import HarnessConfigError
from harness.heap import settle

from .grad import GradTrace

if TYPE_CHECKING:
    import torch

_R = TypeVar("_R")


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

    # A run may also have `models` (a mapping of role names, e.g. "policy", to the modules the run handed its
    # trainer; observe() keeps a float64 CPU copy of each, made before training, for the forward recompute) and
    # `prompts` (the (N, P) prompts handed to the trainer, left-padded with pad_token_id; without `models` and
    # `prompts` the recompute is not recomputable). The members its algorithm's instruments read (`Instruments`)
    # are that algorithm's: docs/architecture.md lists them.


def missing_members(run: Any) -> list[str]:
    """The members of `TargetRun` that `run` lacks (empty when it satisfies the protocol)."""
    members = [*TargetRun.__annotations__, "train"]
    return [name for name in members if not hasattr(run, name)]


@dataclass(frozen=True)
class Recording:
    """What an algorithm's instruments hand `observe` while they are installed around a run."""

    clock: Callable[[], int] = lambda: 0
    """How many calls they have recorded so far: the gradient recorder stamps each backward pass and step with it."""
    payload: Callable[[Any], Any] = lambda run: None
    """After the run: the algorithm's frozen record of it (`Ran.payload`), from what they saw and the run's members."""


class Instruments(Protocol):
    """An algorithm's declaration of what `observe` installs around a run of its spec, and how their output becomes
    the algorithm's record of the run (`Algorithm.instruments`; a spec of the algorithm names it as `instruments`)."""

    members: tuple[str, ...]
    """The run members its record is made of that a run of the algorithm must have (a run that lacks one, or has
    one that only another algorithm's record is made of, does not fit the algorithm: harness/preflight.py)."""
    reads: str
    """What its checks read, in a few words without an article ("loss records"), as preflight names it."""

    def install(self, run: TargetRun, spy: bool = True) -> contextlib.AbstractContextManager[Recording]:
        """Its recorders, installed around `run` for the block; `spy` false: without the spy and what records into it
        (a check that reads none of the spy's records asks for the run without them)."""
        ...


class RunSpec(Protocol, Hashable):
    """What observe needs of a spec: it is hashable (the cache key), validates its own geometry, and names the
    instruments of its algorithm."""

    instruments: Instruments

    def validate(self) -> None:
        """Raise HarnessConfigError for settings no trainer can run."""
        ...


@dataclass(frozen=True)
class Ran:
    """A run that finished: what it logged and what the gradient recorder saw, as every algorithm has them, and
    `payload`, its algorithm's own frozen record of what its instruments recorded."""

    logs: tuple[dict[str, float], ...]
    grads: GradTrace
    pad_token_id: int
    stop_token_id: int
    payload: Any = None
    """The algorithm's record of the run (its instruments' `Recording.payload`); read through that algorithm's view."""
    networks: Any = None
    """Float64 CPU copies of the run's `models`, taken before training (None: the run exposes none)."""
    prompts: torch.Tensor | None = None
    """The prompts the run was given, (N, P) int64 on the CPU (None: the run exposes none)."""

    def record(self, kind: type[_R]) -> _R:
        """`payload` as the record type `kind` of the algorithm reading it (TypeError for another type of record)."""
        if not isinstance(self.payload, kind):
            raise TypeError(f"the run's record is a {type(self.payload).__name__}, not a {kind.__name__}")
        return self.payload


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
    run: TargetRun, instruments: Instruments, spy: bool = True, copies: bool = False, track: bool = False
) -> Iterator[tuple[Recording, Any]]:
    """Every instrument `observe` trains `run` under, installed for the block: (what `instruments` record, the
    GradRecorder).

    `spy`: handed to `instruments.install`; `copies`: the gradient recorder keeps each step's `.grad` copy;
    `track`: it proves `.grad` the contributions' sum instead of summing them, where it can (grad.py).
    """
    from .grad import GradRecorder

    with (
        instruments.install(run, spy) as recording,
        GradRecorder(run.params, run.optimizer, recording.clock, copies=copies, track=track) as grads,
    ):
        yield recording, grads


def observe(
    factory: Callable, spec: RunSpec, spy: bool = True, copies: bool = False, track: bool | None = None
) -> Observation:
    """Build the target's run for `spec` and train it under the instruments of the spec's algorithm (`spy`: handed
    to them) and the gradient recorder, which keeps each step's `.grad` copy when `copies` is set.

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
    with instrumented(run, spec.instruments, spy, copies, track) as (recording, grads):
        logs = run.train()
    try:
        trace = grads.trace()
    except GradTrackingLost:
        return observe(factory, spec, spy, copies, track=False)
    outcome = Ran(
        logs=tuple(logs),
        grads=trace,
        pad_token_id=run.pad_token_id,
        stop_token_id=run.stop_token_id,
        payload=recording.payload(run),
        networks=networks,
        prompts=prompts,
    )
    return Observation(spec, outcome)


class ObservationCache:
    """Session-wide cache: each (target, spec) runs once however many checks read it.

    `target`: the resolved target whose factory this is (`harness.targets.Target`), whose declarations the checks
    read; None for a bare factory (a test's variant), which declares nothing.
    """

    def __init__(self, factory: Callable, target: Any = None) -> None:
        self.factory = factory
        self.target = target
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
        settle()  # what the cache keeps, and what the run left alive, off later collections (harness/heap.py)
        return self._seen[key]
