"""What the `openrlhf` target records while OpenRLHF updates the policy: one `LossRecord` per `training_step`.

Ours: the wrappers; what they wrap is OpenRLHF's. `ActorPPOTrainer.ppo_train` calls `self.training_step(experience,
...)` once per micro-batch, which calls the actor (`Actor.forward`: `compute_entropy` and `log_probs_from_logits`,
looked up in openrlhf/models/actor.py at call time) and then `self.actor_loss_fn` (a `PolicyLoss`) with the
log-probs the loss differentiates first. The recorder wraps the trainer's `training_step` (the micro-batch's mask,
old and reference log-probs, advantages and rows), its `actor_loss_fn` (the log-probs, with a hook that keeps the
gradient the backward pass brings them: `logp_grad`), and the two functions of the actor's module (the entropies,
and the gaps of both to their float64 formulas: `logit_recompute`); it counts the torch optimizer's steps with a
step post-hook (`window`), not `DeepspeedStrategy.optimizer_step`, which runs after every micro-batch while
DeepSpeed's engine steps the optimizer once per `accumulated_gradient` of them. Each row's place in its generation
batch travels in the experience's `info` under `ROW`, which OpenRLHF splits and merges with the rows.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch

from harness.instrument.logits import LogitGaps, entropy_f64, logps_f64
from harness.instrument.loss import LossRecord

ROW = "harness_row"
"""The `Experience.info` key holding each row's place in its generation batch (ours; left out of the logs)."""


@dataclass
class _Live:
    fields: dict
    gaps: LogitGaps = field(default_factory=LogitGaps)
    logps: torch.Tensor | None = None
    entropies: torch.Tensor | None = None
    grad: list[torch.Tensor | None] = field(default_factory=lambda: [None])
    held: dict[str, str] = field(default_factory=dict)


@dataclass
class OpenRLHFRecorder:
    """Records OpenRLHF's training steps on `trainer` while installed (`with recorder:`); `records` after the run."""

    trainer: Any
    optimizer: Any
    width: int
    """The completion positions every record is padded to (max_completion_length): OpenRLHF's replay buffer strips
    each row's right padding and pads a micro-batch to its longest row only."""
    pad_token_id: int
    generation_ids: dict[int, torch.Tensor] = field(default_factory=dict)
    """The completion ids of each generation batch (the target's), by generation."""
    generation: int = 0
    windows: int = 0
    _done: list[_Live] = field(default_factory=list)
    _live: _Live | None = None
    _patches: contextlib.ExitStack | None = None

    def __enter__(self) -> OpenRLHFRecorder:
        from openrlhf.models import actor

        self._patches = contextlib.ExitStack()
        for owner, name, wrap in ((self.trainer, "training_step", self._step),
                                  (self.trainer, "actor_loss_fn", self._loss),
                                  (actor, "compute_entropy", self._gaps("entropies", entropy_f64)),
                                  (actor, "log_probs_from_logits", self._gaps("logps", logps_f64))):  # fmt: skip
            self._patches.enter_context(mock.patch.object(owner, name, wrap(getattr(owner, name))))
        hook = self.optimizer.register_step_post_hook(lambda *args: setattr(self, "windows", self.windows + 1))
        self._patches.callback(hook.remove)
        return self

    def __exit__(self, *exc_info) -> None:
        self._patches.close()

    def _step(self, training_step):
        @functools.wraps(training_step)
        def recorded_step(experience, *args, **kwargs):
            self._live = _Live(self._fields(experience))
            try:
                return training_step(experience, *args, **kwargs)
            finally:
                self._done.append(self._live)
                self._live = None

        return recorded_step

    def _loss(self, loss_fn):
        def recorded_loss(log_probs, *args, **kwargs):
            live = self._live
            if live is not None and live.logps is None:
                live.logps = log_probs.detach().to(torch.float64).cpu()
                live.held["logps"] = str(log_probs.dtype).removeprefix("torch.")
                if log_probs.requires_grad:
                    log_probs.register_hook(lambda grad: live.grad.__setitem__(0, grad.detach().to(torch.float64)))
            return loss_fn(log_probs, *args, **kwargs)

        return recorded_loss

    def _gaps(self, key: str, formula):
        """A wrapper of the actor module's function for `key` ("logps", "entropies") that returns what it returns and
        keeps its largest gap to `formula` (float64) in a live training step; the entropies are kept too, sliced as
        `Actor.forward` slices them for the loss (one position off the end, the last `width` positions)."""

        def wrap(function):
            def recorded(logits, *args, **kwargs):
                out = function(logits, *args, **kwargs)
                live = self._live
                if live is not None:
                    with torch.no_grad():
                        live.gaps._keep(key, out, formula(logits, *args))
                        if key == "entropies":
                            width = live.fields["completion_mask"].shape[1]
                            live.entropies = out[:, :-1][:, -width:].to(torch.float64).cpu()
                return out

            return recorded

        return wrap

    def _fields(self, experience) -> dict[str, Any]:
        rows = torch.as_tensor([int(row) for row in experience.info[ROW]], dtype=torch.int64)  # merged as a list
        mask = experience.action_mask.to(torch.bool).cpu()
        ids = self.generation_ids[self.generation][rows][:, : mask.shape[1]]
        ref = experience.base_action_log_probs
        return {
            "generation": self.generation,
            "window": self.windows,
            "rank": 0,
            "completion_mask": mask,
            "old_logps": experience.action_log_probs.detach().to(torch.float64).cpu(),
            "ref_logps": None if ref is None else ref.detach().to(torch.float64).cpu(),
            "advantages": experience.advantages.detach().to(torch.float64).cpu()[:, 0],
            "completions": rows,
            "completion_ids": ids,
        }

    @property
    def records(self) -> tuple[LossRecord, ...]:
        """One record per OpenRLHF training step, in the order they ran, each (B, T) tensor padded to `width`."""
        out = []
        for live in self._done:
            fields = dict(live.fields, logps=live.logps, entropies=live.entropies, logp_grad=live.grad[0])
            for name in ("completion_mask", "old_logps", "ref_logps", "completion_ids", "logps", "entropies",
                         "logp_grad"):  # fmt: skip
                fields[name] = self._padded(fields[name], self.pad_token_id if name == "completion_ids" else 0)
            out.append(LossRecord(**fields, logit_gaps=live.gaps.record(), held=live.held))
        return tuple(out)

    def _padded(self, tensor: torch.Tensor | None, value) -> torch.Tensor | None:
        if tensor is None:
            return None
        tensor = tensor.cpu()
        return torch.nn.functional.pad(tensor, (0, self.width - tensor.shape[1]), value=value)
