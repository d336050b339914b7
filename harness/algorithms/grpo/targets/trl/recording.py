"""What the `trl-grpo` target records while TRL trains: the harness's `LossRecorder` around TRL's loss, and which
completion of its generation batch each row of a loss micro-batch is.

The recorder wraps TRL's `_compute_loss(model, inputs)` (each training call one micro-batch) and
takes the log-probs and entropies from its one call of `_get_per_token_logps_and_entropies`, and
compares them with their float64 formulas at the functions that computed them (entry.py); the
record's other fields come from the `inputs` the loss received (`completion_mask`, times the tool
mask when there is one; `advantages`; `old_per_token_logps`, absent on on-policy steps;
`ref_per_token_logps`, when `beta != 0`; `completion_ids`, padded as TRL pads them). A wrapper of
`_generate_and_score_completions` counts the training generations (and tells the reward tap which
generation it scores) and keeps each returned row's prompt and completion ids, by which a loss row
is found in its generation batch (`completions`). Calls in evaluation mode are not recorded.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.reward_calls import RewardTap

from .entry import EntryPoints


def row_keys(batch: dict[str, Any]) -> list[tuple]:
    """Each row's prompt ids, then -1, then its completion ids (pads included): what tells the rows apart."""
    return [(*p, -1, *c) for p, c in zip(batch["prompt_ids"].tolist(), batch["completion_ids"].tolist())]


@dataclass
class Rows:
    """The training generations TRL made so far, and the place of each of their rows in the generation batch."""

    trainer: Any
    rewards: RewardTap
    generations: int = 0
    _rows: dict[int, dict[tuple, list[int]]] = field(default_factory=dict)
    _used: dict[tuple[int, tuple], int] = field(default_factory=dict)

    def training(self) -> bool:
        """Whether TRL's model is in training mode (the loss calls that are recorded)."""
        return bool(self.trainer.model.training)

    def counting(self, generate):
        """`_generate_and_score_completions`, counting the training generations and keeping their rows."""

        def recorded_generate(inputs):
            training = self.training()
            if training:
                self.generations += 1
                self.rewards.generation = self.generations - 1
            output = generate(inputs)
            if training:
                self._rows[self.generations - 1] = rows = {}
                for i, key in enumerate(row_keys(output)):
                    rows.setdefault(key, []).append(i)
            return output

        return recorded_generate

    def fields(self, model, inputs: dict[str, Any]) -> dict[str, Any]:
        """What one loss call's `inputs` say of its loss record (the recorder copies the tensors)."""
        generation = self.generations - 1
        completions = []
        for key in row_keys(inputs):
            places = self._rows.get(generation, {}).get(key, [-1])
            seen = self._used.get((generation, key), 0)  # identical rows take their places in turn
            self._used[(generation, key)] = seen + 1
            completions.append(places[seen % len(places)])
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        return {
            "generation": generation,
            "window": int(self.trainer.state.global_step),
            "rank": int(self.trainer.accelerator.process_index),
            "completion_mask": mask,
            "completions": completions,
            "completion_ids": inputs["completion_ids"],
            "old_logps": inputs.get("old_per_token_logps"),
            "ref_logps": inputs.get("ref_per_token_logps"),
            "advantages": inputs["advantages"],
        }


def recorder(trainer: Any, module: types.ModuleType, rewards: RewardTap, points: EntryPoints) -> LossRecorder:
    """The loss recorder of one TRL GRPO trainer (`module`: its trainer module; `points`: the functions of its
    log-probs and entropies that it wraps, entry.py)."""
    rows = Rows(trainer, rewards)
    loss = LossRecorder(trainer, "_compute_loss", module, rows.fields, outputs="_get_per_token_logps_and_entropies",
                        keep=rows.training, logits=points.logits)  # fmt: skip
    loss.around(trainer, "_generate_and_score_completions", rows.counting)
    return loss
