"""What observe installs around a GRPO run, and GRPO's record of the run (`Ran.payload`): `GRPORecords`.

A GRPO run records itself: its target wraps the loss and the reward functions (`LossRecorder`, `RewardTap`) and
hands over `loss_inputs` and `reward_calls` (harness/instrument/loss.py), so nothing is installed but the gradient
recorder `observe` always installs. Dicts with a record's field names become records; a malformed one is a usage
error (exit 2).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.instrument.loss import LossRecord, RewardCall
    from harness.instrument.observe import Ran, Recording, TargetRun


@dataclass(frozen=True)
class GRPORecords:
    """What a GRPO run recorded of its loss and its reward functions."""

    loss_inputs: tuple[LossRecord, ...] | None = None
    """One record per micro-batch of its loss, in the order they ran (None: the run records none)."""
    reward_calls: tuple[RewardCall, ...] | None = None
    """One record per call of a reward function it handed its trainer (None: the run records none)."""


def recorded(ran: Ran) -> GRPORecords:
    """The GRPO record of a finished run (TypeError for a run observed under another algorithm's instruments)."""
    return ran.record(GRPORecords)


def handed_over(run: Any) -> GRPORecords:
    """The records `run` kept, as frozen records (dicts converted; HarnessConfigError naming a malformed one)."""
    from harness.instrument import loss

    return GRPORecords(
        loss_inputs=loss.loss_records(getattr(run, "loss_inputs", None)),
        reward_calls=loss.reward_calls(getattr(run, "reward_calls", None)),
    )


@dataclass(frozen=True)
class GRPOInstruments:
    """No recorder of its own: the run's loss records (`harness.instrument.observe.Instruments`)."""

    members: tuple[str, ...] = ("loss_inputs",)
    reads: str = "loss records"

    @contextlib.contextmanager
    def install(self, run: TargetRun, spy: bool = True) -> Iterator[Recording]:
        """Nothing to install (`spy` changes nothing: a GRPO run is never spied on); the record is the run's own."""
        from harness.instrument.observe import Recording

        yield Recording(payload=handed_over)


INSTRUMENTS = GRPOInstruments()
"""GRPO's instruments, as `GRPO.instruments` and every `GRPOSpec` name them."""
