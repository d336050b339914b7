"""What the `verl` target records while verl updates the policy: one `LossRecord` per call of verl's loss.

Ours: the wrappers; what they wrap is verl's. verl's worker hands its engine its loss as `worker.loss_fn`
(`functools.partial(verl.workers.utils.losses.ppo_loss, config=...)`), which the engine calls once per micro-batch
with the model's output and the micro-batch; `ppo_loss` turns the log-probs (and entropies, when computed) into
padded (B, T) tensors with `no_padding_2_padding`, looked up in its module at call time. The recorder wraps
`worker.loss_fn`, and inside a loss call keeps the first `no_padding_2_padding` result as the record's log-probs
(hooking the gradient its backward pass delivers to them) and a second as its entropies; it compares the log-probs
and entropies verl's engine computes (`logprobs_from_logits`, `entropy_from_logits`) with their float64 formulas
(`logit_gaps`); and it counts the engine's optimizer steps (`window`). The rows' places in their generation batch
come from a column the target adds to verl's batch (`ROW`), which verl carries through its own splits.

verl's update computes no entropies (calculate_entropy is off unless entropy_coeff != 0): the entropy it logs is
`agg_loss` of those of the old log-prob pass (`RayPPOTrainer.fit`, `_compute_old_log_prob`), before the update. The
target hands the recorder that pass's entropies, as verl's `no_padding_2_padding` returned them (`old_pass`), and each
record keeps its rows' as `old_entropies`. The engine computes entropies with the function it bound at its
construction (`compute_entropy_from_logits`, verl's `entropy_from_logits`); the recorder wraps that attribute and
keeps the largest gap to the float64 formula over the policy's forward-only passes of each generation, which a record
whose own loss computed no entropies carries as its `logit_gaps.entropies`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.instrument.logits import LogitGaps, entropy_f64, logps_f64
from harness.instrument.loss import LossRecord

ROW = "harness_row"
"""The batch column holding each row's place in its generation batch."""


@dataclass
class _Live:
    gaps: LogitGaps = field(default_factory=LogitGaps)
    padded: list[torch.Tensor] = field(default_factory=list)
    grad: list[torch.Tensor | None] = field(default_factory=lambda: [None])


@dataclass
class VerlRecorder:
    """Records verl's loss calls on `worker` while installed (`with recorder:`); `records` after the run."""

    worker: Any
    generation_ids: dict[int, torch.Tensor] = field(default_factory=dict)
    """The completion ids of each generation batch (the target's), by generation."""
    generation: int = 0
    windows: int = 0
    old_entropies: dict[int, torch.Tensor] = field(default_factory=dict)
    """The entropies of each generation's old log-prob pass, (rows, T) float64 (`old_pass`), by generation."""
    _old_gaps: dict[int, LogitGaps] = field(default_factory=dict)
    _forward_only: bool = False
    _drafts: list[tuple[dict, _Live]] = field(default_factory=list)
    _live: _Live | None = None
    _undo: list[tuple[Any, str, Any]] = field(default_factory=list)

    def __enter__(self) -> VerlRecorder:
        from verl.utils import torch_functional
        from verl.workers.engine.fsdp import transformer_impl
        from verl.workers.utils import losses

        engine = self.worker.engine
        self._swap(engine, "forward_step", self._forward)
        self._swap(losses, "no_padding_2_padding", self._padding)
        self._swap(transformer_impl, "logprobs_from_logits", self._logps)
        self._swap(torch_functional, "entropy_from_logits", self._entropy)
        self._swap(engine, "compute_entropy_from_logits", self._entropy)
        self._swap(engine, "optimizer_step", self._stepping)
        return self

    def __exit__(self, *exc_info) -> None:
        while self._undo:
            owner, name, value = self._undo.pop()
            setattr(owner, name, value)

    def _swap(self, owner: Any, name: str, wrap) -> None:
        original = getattr(owner, name)
        self._undo.append((owner, name, original))
        setattr(owner, name, wrap(original))

    def _forward(self, forward_step):
        @functools.wraps(forward_step)
        def recorded_forward(micro_batch, loss_function, forward_only):
            if forward_only:
                self._forward_only = True
                try:
                    return forward_step(micro_batch, loss_function, forward_only)
                finally:
                    self._forward_only = False
            live = self._live = _Live()
            try:
                result = forward_step(micro_batch, loss_function, forward_only)
            finally:
                self._live = None
            self._drafts.append((self._fields(micro_batch), live))
            return result

        return recorded_forward

    def _padding(self, padding):
        def recorded_padding(*args, **kwargs):
            out = padding(*args, **kwargs)
            live = self._live
            if live is not None and len(live.padded) < 2:
                live.padded.append(out)
                if len(live.padded) == 1 and out.requires_grad:
                    out.register_hook(lambda grad: live.grad.__setitem__(0, grad.detach().to(torch.float64)))
            return out

        return recorded_padding

    def _logps(self, function):
        def recorded_logps(logits, labels, *args, **kwargs):
            out = function(logits, labels, *args, **kwargs)
            if self._live is not None:
                with torch.no_grad():
                    self._live.gaps._keep("logps", out, logps_f64(logits, labels))
            return out

        return recorded_logps

    def _entropy(self, function):
        def recorded_entropy(logits, *args, **kwargs):
            out = function(logits, *args, **kwargs)
            gaps = self._live.gaps if self._live is not None else None
            if gaps is None and self._forward_only:
                gaps = self._old_gaps.setdefault(self.generation, LogitGaps())
            if gaps is not None:
                with torch.no_grad():
                    gaps._keep("entropies", out, entropy_f64(logits))
            return out

        return recorded_entropy

    def _stepping(self, step):
        def recorded_step(*args, **kwargs):
            try:
                return step(*args, **kwargs)
            finally:
                self.windows += 1

        return recorded_step

    def old_pass(self, generation: int, entropies: torch.Tensor) -> None:
        """Keep the per-token entropies of `generation`'s old log-prob pass ((rows, T), padded as verl pads them)."""
        self.old_entropies[generation] = entropies.detach().to(torch.float64).cpu()

    def _fields(self, data) -> dict[str, Any]:
        padded = data.select(*(k for k in ("response_mask", "old_log_probs", "advantages", "ref_log_prob", ROW)
                               if k in data.keys())).to_padded_tensor()  # fmt: skip
        rows = padded[ROW].reshape(-1).to(torch.int64).cpu()
        mask = padded["response_mask"].to(torch.bool).cpu()
        ids = self.generation_ids[self.generation][rows][:, : mask.shape[1]]
        ref = padded.get("ref_log_prob", None)
        before = self.old_entropies.get(self.generation)
        return {
            "generation": self.generation,
            "window": self.windows,
            "rank": 0,
            "completion_mask": mask,
            "old_logps": padded["old_log_probs"].detach().to(torch.float64).cpu(),
            "ref_logps": None if ref is None else ref.detach().to(torch.float64).cpu(),
            "advantages": padded["advantages"].detach().to(torch.float64).cpu()[:, 0],
            "completions": rows,
            "completion_ids": ids,
            "old_entropies": None if before is None else before[rows][:, : mask.shape[1]],
        }

    @property
    def records(self) -> tuple[LossRecord, ...]:
        """One record per verl loss call, in the order they ran."""
        out = []
        for fields, live in self._drafts:
            logps = live.padded[0] if live.padded else None
            entropies = live.padded[1] if len(live.padded) > 1 else None
            held = {"logps": str(logps.dtype).removeprefix("torch.")} if logps is not None else {}
            gaps = live.gaps.record()
            old = self._old_gaps.get(fields["generation"])
            if gaps.entropies is None and old is not None:  # the entropies verl logs are the old pass's
                gaps = dataclasses.replace(gaps, entropies=old.entropies)
            out.append(LossRecord(**fields,
                                  logps=None if logps is None else logps.detach().to(torch.float64).cpu(),
                                  entropies=None if entropies is None else entropies.detach().to(torch.float64).cpu(),
                                  logit_gaps=gaps,
                                  logp_grad=None if live.grad[0] is None else live.grad[0].cpu(),
                                  held=held))  # fmt: skip
        return tuple(out)
