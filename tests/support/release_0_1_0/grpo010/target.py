"""The reference GRPO trainer (reference_trainers/grpo.py) on the toy world, recording what its loss was fed.

The trainer never imports the harness. While it trains, the harness's `LossRecorder`
(harness/instrument/loss_recorder.py) wraps, on the trainer object and without changing what
they compute, `micro_step` (the loss entry point: one `LossRecord` per micro-batch), and, for
the recorder's duration, the module-level `selective_log_softmax` and `entropy_from_logits` of
`reference_trainers.grpo`: inside a micro-step the first result of each is the record's `logps` and
`entropies` (the first log-prob call of a micro-step is `per_token_logps`; docs/grpo-metrics.md
lists the call sites), each result's largest gap to its float64 recomputation from the logits is
kept (`logit_gaps`), and a hook on the micro-step's log-probs keeps the gradient its backward
pass delivers to them (`logp_grad`). It also wraps `window_step` to count the optimizer steps
(each record's `window`) and `generate` to say which generation the reward functions score; the
reward functions it hands the trainer are wrapped to record their scores (`reward_calls`,
harness/instrument/reward_calls.py). Each loss record names its rows' places in their generation
batch (`completions`) and keeps their sampled token ids (`completion_ids`), which with the run's
`stop_token_id` say whether each ended with the stop token. Every wrapper is put back after `train()`.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.errors import HarnessConfigError
from harness.instrument.loss import LossRecord
from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.reward_calls import RewardTap
from harness.targets.logged import LogTap

CONFIG_FIELDS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "num_generations",
    "num_iterations",
    "max_steps",
    "logging_steps",
    "learning_rate",
    "max_completion_length",
    "temperature",
    "loss_type",
    "beta",
    "use_bias_correction_kl",
    "epsilon_low",
    "epsilon_high",
    "delta",
    "scale_rewards",
    "reward_weights",
    "max_grad_norm",
    "seed",
)
"""GRPOSpec fields handed to the reference GRPOConfig under the same names."""


@dataclass
class ReferenceGRPORun:
    """A reference GRPOTrainer built for one scenario; satisfies TargetRun and records `loss_inputs`."""

    trainer: Any
    module: types.ModuleType
    pad_token_id: int
    stop_token_id: int
    rank: int
    tap: LogTap
    log_steps: tuple[int, ...]
    rewards: RewardTap = field(default_factory=RewardTap)
    windows: int = 0
    generations: int = 0
    recorder: LossRecorder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.recorder = LossRecorder(self.trainer, "micro_step", self.module, self._fields)
        self.recorder.around(self.trainer, "generate", self._counting_generations)
        self.recorder.around(self.trainer, "window_step", self._counting_windows)

    def _counting_generations(self, generate):
        def recorded_generate():
            self.rewards.generation = self.generations
            try:
                return generate()
            finally:
                self.generations += 1

        return recorded_generate

    def _counting_windows(self, window_step):
        def recorded_window_step(batch, micro_batches):
            try:
                return window_step(batch, micro_batches)
            finally:
                self.windows += 1

        return recorded_window_step

    def _fields(self, batch, rows, denominator) -> dict[str, Any]:
        """What a micro-step's arguments say of its loss record (the recorder copies the tensors)."""
        old, ref = batch.old_per_token_logps, batch.ref_per_token_logps
        return {
            "generation": int(batch.index),
            "window": self.windows,
            "rank": self.rank,
            "completion_mask": batch.completion_mask[rows],
            "completions": rows,
            "completion_ids": batch.completion_ids[rows],
            "old_logps": None if old is None else old[rows],
            "ref_logps": None if ref is None else ref[rows],
            "advantages": batch.advantages[rows],
        }

    @property
    def loss_inputs(self) -> tuple[LossRecord, ...]:
        """One record per micro-batch of the loss, in the order they ran (docs/architecture.md)."""
        return self.recorder.records

    @property
    def reward_calls(self) -> list:
        """One record per call of a reward function the trainer was handed."""
        return self.rewards.calls

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return getattr(self.trainer.optimizer, "optimizer", self.trainer.optimizer)

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.trainer.model.parameters() if p.requires_grad]

    def train(self) -> list[dict[str, float]]:
        """Every step, under the recorder; the metrics as the trainer logged them (callbacks and trackers) at
        `log_steps`."""
        with self.recorder:
            returned = self.trainer.train()
        return self.tap.logged(returned, steps=self.log_steps)


def factory(spec, accelerator=None) -> ReferenceGRPORun:
    """Build the reference GRPO trainer on the toy world of `spec` (a GRPOSpec), rewarded for token 7."""
    from accelerate import Accelerator

    from harness.targets.toy import toy_world

    from . import toy
    from . import trainer as grpo
    from .ppo_config import ConfigError

    world = toy_world(spec)
    try:
        config = grpo.GRPOConfig(stop_token_id=world.stop_token_id,
                                 **{name: getattr(spec, name) for name in CONFIG_FIELDS})  # fmt: skip
    except ConfigError as exc:
        raise HarnessConfigError(f"reference-grpo target: {exc}") from None
    accelerator, tap = accelerator or Accelerator(cpu=spec.device == "cpu"), LogTap()
    tap.attach(accelerator)
    rewards = RewardTap(rank=accelerator.process_index)
    funcs = toy_rewards(len(spec.reward_weights or (1.0,)), world.stop_token_id, toy.count_token_reward(7))
    trainer = grpo.GRPOTrainer(
        config,
        world.policy,
        world.ref_policy if spec.beta != 0 else None,
        {name: rewards.wrap(name, f) for name, f in funcs.items()},
        world.prompts,
        world.pad_token_id,
        callbacks=[tap.callback],
        accelerator=accelerator,
    )
    return ReferenceGRPORun(trainer, grpo, world.pad_token_id, world.stop_token_id, accelerator.process_index,
                            tap, log_steps(spec.max_steps, spec.logging_steps), rewards)  # fmt: skip


def toy_rewards(count: int, stop_token_id: int, count_w7) -> dict:
    """The toy world's reward functions: token 7's count (`count_w7`), which scores every completion; or, for two
    weights, that count and whether the completion ended with the stop token (1 or 0), each unable to score some
    completions (NaN): the count where the first token is a multiple of 4 (pad, an empty completion, included),
    the stop where it is that or odd. So about a quarter of the completions get no score at all, half of them one,
    and rewards tie often enough that some groups have std 0."""
    if count == 1:
        return {"count_w7": count_w7}
    nan = float("nan")

    def count_w7_partial(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        return count_w7(queries, responses).masked_fill(responses[:, 0] % 4 == 0, nan)

    def stopped_partial(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        first = responses[:, 0]
        stopped = (responses == stop_token_id).any(dim=1).to(torch.float32)
        return stopped.masked_fill((first % 4 == 0) | (first % 2 == 1), nan)

    return {"count_w7": count_w7_partial, "stopped": stopped_partial}


def log_steps(max_steps: int, logging_steps: int) -> tuple[int, ...]:
    """The optimizer steps at which a GRPO trainer logs: every `logging_steps`-th, and the last if it is not one."""
    steps = tuple(range(logging_steps, max_steps + 1, logging_steps))
    return steps if max_steps % logging_steps == 0 else (*steps, max_steps)


factory.algorithm = "grpo"


factory.algorithm = "grpo"  # a GRPO factory outside the project named its algorithm at 0.1.0 (the default was ppo)
