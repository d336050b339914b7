"""The bench's sizes: which target, which run (a ScenarioSpec) and which model shape each one measures.

`small` is the toy world of the verify gate (the reference target, a two-layer model of a few
thousand parameters, vocabulary 32). `medium` and `large` are Llama models built from a config
(random weights, nothing downloaded) by the bench's own target, `harness.bench.targets.scaled`:
medium is ~110M parameters per model (vocabulary 32k, responses of 128 tokens) and finishes on
one CPU core in a few minutes; large is a 1.1B model per policy (TinyLlama's shape) with
256-token responses, meant for CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.algorithms.ppo.scenarios import UNEVEN
from harness.algorithms.ppo.spec import ScenarioSpec

from .shapes import LARGE_SHAPE, MEDIUM_SHAPE, ModelShape


@dataclass(frozen=True)
class Size:
    """One bench size: the target that builds its runs, the run, the default number of timed pairs."""

    name: str
    target: str
    """A name for `harness.targets.resolve`: a built-in target or `module:factory`."""
    spec: ScenarioSpec
    repeat: int
    """Timed (bare, spied+checked) pairs by default: enough for a median, few enough for the time goal."""
    shape: ModelShape | None = None
    """The model shape, for the bench's own target (None: the toy world's two-layer model)."""
    meant_for: str = "cpu"
    warmup: int = 1
    """Untimed spied runs before the profiled one (the profiled run is untimed too)."""


SMALL = Size("small", "reference", UNEVEN.with_(total_updates=1), repeat=7)

# 6 rollout rows cut into micro-batches of 2+1 (two minibatches, one optimizer step each): the
# uneven split of the gate, with half its rows so that a CPU update takes ~20 s, not ~40 s.
_SCALED = UNEVEN.with_(
    total_updates=1,
    vocab_size=32000,
    prompt_length=16,
    response_length=128,
    per_device_train_batch_size=2,
    gradient_accumulation_steps=3,
    num_mini_batches=2,
    learning_rate=1e-5,
)

MEDIUM = Size(
    "medium",
    "harness.bench.targets.scaled:medium",
    _SCALED.with_(name="bench_medium"),
    repeat=5,  # rounds of 16-20 s runs on 2 cores: three left the median to one round's page faults
    warmup=0,  # the profiled run warms the process up; a second ~20 s run would buy nothing
    shape=MEDIUM_SHAPE,
)

LARGE = Size(
    "large",
    "harness.bench.targets.scaled:large",
    _SCALED.with_(
        name="bench_large",
        response_length=256,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=3,
        num_mini_batches=2,
    ),
    repeat=5,
    shape=LARGE_SHAPE,
    meant_for="cuda",
)

SIZES: dict[str, Size] = {s.name: s for s in (SMALL, MEDIUM, LARGE)}
