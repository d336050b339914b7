"""What observe installs around a PPO run, and PPO's record of the run (`Ran.payload`): `PPORecords`.

Under the spy: the spy on the run's module (masked_mean, selective_log_softmax), and the recorders of its
`value_head` and `reward_model` where it exposes them, whose records join the spy's. Without it (a check that
reads no spy record), nothing. Either way the record keeps what the run hands over: its `scores`, `site_map`, and
for a reward on decoded text its `scored_texts` and `tokenizer` (docs/architecture.md, "Targets").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from harness.instrument.observe import Ran, Recording, TargetRun
    from harness.instrument.records import Record


@dataclass(frozen=True)
class PPORecords:
    """What a PPO run's instruments recorded, and what the run handed over with it."""

    records: tuple[Record, ...] = ()
    """The spy's records, in call order (each log-prob and value-head record with its gradient); () without it."""
    scores: tuple[torch.Tensor, ...] | None = None
    """The scores handed to the trainer, one tensor per rollout (None: the run hands none)."""
    sites: Any = None
    """The run's site map (its names for the call sites), or None for the algorithm's default."""
    reward_model: bool = False
    """The run exposed its reward model and ran under the spy: the scores are the oracle's, from the reward-head
    records."""
    scored_texts: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] | None = None
    """Per rollout, the (prompts, responses) strings a reward on text was given (None: the run shows none)."""
    tokenizer: Any = None
    """The tokenizer the oracle decodes the rollout with to check `scored_texts` (None: the run shows none)."""


def recorded(ran: Ran) -> PPORecords:
    """The PPO record of a finished run (TypeError for a run observed under another algorithm's instruments)."""
    return ran.record(PPORecords)


def handed_over(run: Any, records: tuple[Record, ...] = (), reward_model: bool = False) -> PPORecords:
    """The record of `run` after training, with the spy's `records`; `reward_model`: its head was recorded."""
    scores = getattr(run, "scores", None)
    seen = getattr(run, "scored_texts", None)
    texts = None if seen is None else tuple((tuple(prompts), tuple(responses)) for prompts, responses in seen)
    return PPORecords(
        records=records,
        scores=None if scores is None else tuple(scores),
        sites=getattr(run, "site_map", None),
        reward_model=reward_model,
        scored_texts=texts,
        tokenizer=None if seen is None else getattr(run, "tokenizer", None),
    )


@dataclass(frozen=True)
class PPOInstruments:
    """The spy with the value head's and reward model's recorders (`harness.instrument.observe.Instruments`)."""

    members: tuple[str, ...] = ()
    reads: str = "spy's records"

    @contextlib.contextmanager
    def install(self, run: TargetRun, spy: bool = True) -> Iterator[Recording]:
        """The spy and the recorders of the run's value head and reward model (`spy` false: none of them)."""
        from harness.instrument.observe import Recording
        from harness.instrument.rewards import RewardRecorder
        from harness.instrument.spy import Spy
        from harness.instrument.values import ValueRecorder

        if not spy:
            yield Recording(payload=handed_over)
            return
        head, model = getattr(run, "value_head", None), getattr(run, "reward_model", None)
        with (
            Spy(run.module) as watcher,
            ValueRecorder(head, watcher) if head is not None else contextlib.nullcontext(),
            RewardRecorder(model, watcher) if model is not None else contextlib.nullcontext(),
        ):
            yield Recording(
                clock=lambda: len(watcher.records),
                payload=lambda done: handed_over(done, tuple(watcher.finished()), model is not None),
            )


INSTRUMENTS = PPOInstruments()
"""PPO's instruments, as `PPO.instruments` and every `ScenarioSpec` name them."""
