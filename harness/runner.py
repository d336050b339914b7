"""Run a target for a scenario under every instrument, once, and keep what was seen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import HarnessConfigError
from .spec import ScenarioSpec


@dataclass
class Observation:
    """What one instrumented run of a target produced."""

    spec: ScenarioSpec
    logs: list[dict[str, float]]
    records: list
    backwards: list[int]
    steps: list
    unapplied: list[int]
    pad_token_id: int
    stop_token_id: int
    scores: list | None = None
    error: str | None = None
    """Set when the trainer raised: what it raised (the checks that read this run then fail, naming it)."""
    extra: dict = field(default_factory=dict)


def validate(spec: ScenarioSpec) -> None:
    """Reject a geometry no trainer can run, before any model work (exit 2)."""
    sizes = {
        "per_device_train_batch_size": spec.per_device_train_batch_size,
        "gradient_accumulation_steps": spec.gradient_accumulation_steps,
        "num_mini_batches": spec.num_mini_batches,
        "num_ppo_epochs": spec.num_ppo_epochs,
        "total_updates": spec.total_updates,
        "response_length": spec.response_length,
    }
    bad = [f"{k}={v}" for k, v in sizes.items() if v <= 0]
    if bad:
        raise HarnessConfigError("sizes must be positive: " + ", ".join(bad))
    if spec.local_batch_size % spec.num_mini_batches:
        raise HarnessConfigError(
            f"local batch {spec.per_device_train_batch_size}*{spec.gradient_accumulation_steps}"
            f"={spec.local_batch_size} is not divisible by num_mini_batches={spec.num_mini_batches}"
        )


def observe(factory: Callable, spec: ScenarioSpec, spy: bool = True) -> Observation:
    """Build the target's trainer for `spec`, run it under the spy and the gradient recorder."""
    from .grad import GradRecorder
    from .spy import Spy

    validate(spec)
    run = factory(spec)
    for name in ("module", "optimizer", "params", "pad_token_id", "stop_token_id", "train"):
        if not hasattr(run, name):
            raise HarnessConfigError(f"target run {type(run).__name__} lacks {name!r} (see docs/architecture.md)")
    records: list = []
    if spy:
        with (
            Spy(run.module) as watcher,
            GradRecorder(run.params, run.optimizer, clock=lambda: len(watcher.records)) as grads,
        ):
            logs = run.train()
        records = list(watcher.records)
    else:
        with GradRecorder(run.params, run.optimizer) as grads:
            logs = run.train()
    return Observation(
        spec=spec,
        logs=logs,
        records=records,
        backwards=grads.backwards,
        steps=grads.steps,
        unapplied=grads.unapplied,
        pad_token_id=run.pad_token_id,
        stop_token_id=run.stop_token_id,
        scores=getattr(run, "scores", None),
    )


class ObservationCache:
    """Session-wide cache: each (target, spec) runs once however many checks read it."""

    def __init__(self, factory: Callable) -> None:
        self.factory = factory
        self._seen: dict[tuple[ScenarioSpec, bool], Observation] = {}

    def clear(self) -> None:
        """Forget every observation (mutmut links tests to code only when each test runs its trainer)."""
        self._seen.clear()

    def get(self, spec: ScenarioSpec, spy: bool = True) -> Observation:
        """The observation of `spec`; a spied run also serves a request without the spy."""
        if (spec, True) in self._seen:
            return self._seen[(spec, True)]
        if (spec, spy) not in self._seen:
            try:
                self._seen[(spec, spy)] = observe(self.factory, spec, spy=spy)
            except HarnessConfigError:
                raise
            except Exception as exc:  # a trainer that crashes fails every check of this run, loudly
                why = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
                self._seen[(spec, spy)] = Observation(spec, [], [], [], [], [], -1, -1, error=why)
        return self._seen[(spec, spy)]
