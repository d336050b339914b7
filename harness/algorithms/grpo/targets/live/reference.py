"""The live check of the reference GRPO trainer (reference_trainers/grpo.py), or a custom loop with its names: a
context manager around its `train()`.

    with live_reference(trainer, every=20) as live:
        trainer.train()
    print(live.summary.line())

While it is open, the trainer's `window_step` (one optimizer step) is wrapped: before the first window of a
sampled logging interval it installs the gate's loss recorder (harness/instrument/loss_recorder.py) on
`micro_step` and on the module-level `selective_log_softmax` and `entropy_from_logits` of the trainer's module, as
the gate's reference target does; a callback put first in the trainer's `callbacks` takes the recorder off at the
interval's log, checks the records (every rank's) against the logged metrics and adds the verdict to them
(`live/<name>_expected`, `_gap`, `_pass`, `live/pass`), so that the other callbacks and accelerate's trackers log
both. Everything is put back on leaving. An error of the check is one WARNING line, never an exception in the
trainer's loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from harness.algorithms.grpo import live as checks
from harness.algorithms.grpo.live import GenerationCut
from harness.algorithms.grpo.oracle.expect import Settings
from harness.algorithms.grpo.targets.reference import micro_step_fields
from harness.instrument.loss_recorder import LossRecorder
from harness.live.interval import Held
from harness.live.session import LiveSession


def reference_settings(trainer: Any) -> Settings:
    """The oracle's settings from the trainer's config (it carries TRL's names; `Settings.of` gives a setting it has
    no field for, a definition the reference implements as TRL does, TRL's value) and its policy's dtype."""
    dtype = next((p.dtype for p in trainer.model.parameters()), None)
    return dataclasses.replace(Settings.of(trainer.config),
                               dtype=str(dtype).removeprefix("torch.") if dtype is not None else "float32")  # fmt: skip


class ReferenceLive(Held):
    """The live check's hold on one reference trainer (what `live_reference` yields)."""

    def __init__(self, trainer: Any, session: LiveSession) -> None:
        self.trainer, self.session = trainer, session
        self.settings = reference_settings(trainer)
        config = trainer.config
        self.geometry = GenerationCut(int(config.steps_per_generation or config.gradient_accumulation_steps),
                                 int(config.num_iterations))  # fmt: skip
        self.module = sys.modules[type(trainer).__module__]
        self.recorder: LossRecorder | None = None
        self.broken = ""
        """Why the recorder of the current sampled interval could not be installed ('' when it was)."""
        self.max_steps: int | None = None
        """The config's `max_steps` before `raise_on_failure` ended the run (None: it did not)."""
        self.rank = int(trainer.accelerator.process_index)

    def _fields(self, batch, rows, denominator) -> dict[str, Any]:
        return micro_step_fields(batch, rows, int(self.trainer.step), self.rank)

    def interval_of(self, step: int) -> int:
        return step // max(int(self.trainer.config.logging_steps), 1)

    def window_step(self, window_step):
        def live_window_step(*args, **kwargs):
            if self.recorder is None and not self.broken:
                interval = self.interval_of(int(self.trainer.step))
                if self.session.sampled(interval):
                    try:
                        recorder = LossRecorder(self.trainer, "micro_step", self.module, self._fields,
                                                tolerant=True)  # fmt: skip
                        recorder.__enter__()
                    except Exception as why:  # noqa: BLE001 - the interval goes unchecked, the run goes on
                        self.broken = f"the recorder could not be installed: {type(why).__name__}: {why}"
                    else:
                        self.recorder = recorder
            return window_step(*args, **kwargs)

        return live_window_step

    def stop(self):
        """Take the recorder off: its records, or None when none was on; RuntimeError naming its first fault."""
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return None
        recorder.__exit__(None, None, None)
        return recorder.checked_records()

    def callback(self, metrics, step) -> None:
        """The trainer's callback, `callback(metrics, step)`, first of its callbacks; it never raises."""
        broken, self.broken = self.broken, ""
        records, why = None, broken
        try:
            records = self.stop()
        except Exception as error:  # noqa: BLE001
            why = why or f"the recorder failed: {type(error).__name__}: {error}"
            records = ()
        if records is None and not why:
            return
        result = self.session.check(records or (), metrics, self.settings, self.interval_of(int(step) - 1),
                                    int(step), geometry=self.geometry, unusable=why)  # fmt: skip
        if self.session.stop_for(result):
            self.end_run()

    def end_run(self) -> None:
        """End the run after this step through the trainer's own control: its loop runs while `step <
        config.max_steps`, so `max_steps` becomes the steps done (put back when the context closes)."""
        config = self.trainer.config
        if self.max_steps is None:
            self.max_steps = config.max_steps
        config.max_steps = min(int(config.max_steps), int(self.trainer.step))


@contextlib.contextmanager
def live_reference(trainer: Any, every: int = 20, **session: Any) -> Iterator[ReferenceLive]:
    """Check one logging interval in `every` of `trainer`'s run while the context is open (module docstring);
    `session`: LiveSession's other settings (validated here). The summary is logged on leaving. With
    `raise_on_failure`, a failing interval ends `trainer.train()` after its step (its loop's own bound,
    `config.max_steps`, lowered to the steps done until the context closes): `train()` returns, `live.failed` is
    True and `live.raise_if_failed()` raises `LiveCheckFailed`."""
    live = ReferenceLive(trainer, LiveSession(every, checks=checks, **session))
    live.session.arm(live.settings, f"{type(trainer).__name__} (reference loop)")
    previous = trainer.__dict__.get("window_step")
    trainer.window_step = live.window_step(trainer.window_step)
    trainer.callbacks.insert(0, live.callback)
    finished = False
    try:
        yield live
        finished = True
    finally:
        with contextlib.suppress(Exception):
            live.stop()
        trainer.callbacks.remove(live.callback)
        if previous is None:
            del trainer.window_step
        else:
            trainer.window_step = previous
        if live.max_steps is not None:
            trainer.config.max_steps = live.max_steps
        if finished:
            live.session.finish()
