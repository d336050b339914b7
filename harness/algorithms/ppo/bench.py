"""PPO's bench (`PPO.bench`, `python -m harness.bench`): its sizes, and the gate's oracle on a run's records, which
harness/bench/measure.py times piece by piece.

`small` is the toy world of the verify gate (the reference target, a two-layer model of a few
thousand parameters, vocabulary 32). `medium` and `large` are Llama models built from a config
(random weights, nothing downloaded) by PPO's bench target, `harness.algorithms.ppo.targets.scaled`:
medium is ~110M parameters per model (vocabulary 32k, responses of 128 tokens) and finishes on
one CPU core in a few minutes; large is a 1.1B model per policy (TinyLlama's shape) with
256-token responses, meant for CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.algorithms.ppo.runs import UNEVEN
from harness.bench.shapes import LARGE_SHAPE, MEDIUM_SHAPE
from harness.bench.sizes import Size

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
    "harness.algorithms.ppo.targets.scaled:medium",
    _SCALED.with_(name="bench_medium"),
    repeat=5,  # rounds of 16-20 s runs on 2 cores: three left the median to one round's page faults
    warmup=0,  # the profiled run warms the process up; a second ~20 s run would buy nothing
    shape=MEDIUM_SHAPE,
)

LARGE = Size(
    "large",
    "harness.algorithms.ppo.targets.scaled:large",
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


class Oracle:
    """The gate's oracle on one run's records, in the three pieces the bench times."""

    @staticmethod
    def view(run: Any, records: Sequence[Any]) -> tuple[Any, tuple[str, ...]]:
        """The records' view, and its mask problems."""
        from harness.algorithms.ppo.view import build_view

        view = build_view(records, run.stop_token_id, run.pad_token_id, getattr(run, "site_map", None))
        return view, tuple(p for update in view.updates for p in update.mask_problems())

    @staticmethod
    def expect(view: Any, run: Any, spec: Any) -> list[dict]:
        """Each update's expected metrics."""
        from harness.algorithms.ppo.oracle.expect import expected_metrics

        scores = getattr(run, "scores", None) or [None] * len(view.updates)
        return [
            expected_metrics(update, spec.kl_coef, spec.kl_estimator, scores=score)
            for update, score in zip(view.updates, scores)
        ]

    @staticmethod
    def compare(logs: Sequence[dict], expected: Sequence[dict], spec: Any) -> list:
        """Every logged metric of the contract against its expected value."""
        from harness.algorithms.ppo.contract import POOLED_STATS, ROLLOUT
        from harness.algorithms.ppo.tolerances import TOLERANCES
        from harness.compare import compare

        names = (*POOLED_STATS, *ROLLOUT)
        return [
            v
            for logged, want in zip(logs, expected)
            for v in compare(
                {n: logged[n] for n in names if n in logged}, {n: want[n] for n in names}, spec.dtype, TOLERANCES
            )
        ]


ORACLE = Oracle()
