"""The reference GRPO trainer (reference_ppo/grpo.py) on the toy world, recording what its loss was fed.

The trainer never imports the harness. This adapter wraps two of the trainer object's
methods on the instance, without changing what they compute: `window_step` to count the
optimizer steps, and `micro_step` to record each micro-batch's loss inputs. While a
micro-step runs, the module-level `selective_log_softmax` and `entropy_from_logits` of
`reference_ppo.grpo` are wrapped to keep a copy of what they return (the first log-prob
call of a micro-step is `per_token_logps`; docs/grpo-metrics.md lists the call sites), and
put back afterwards; the wrappers also keep the largest gap between each result and its float64
recomputation from the logits (`logit_gaps`, harness/algorithms/grpo/logit_gaps.py), and a hook on the
micro-step's log-probs keeps the gradient its backward pass delivers to them (`logp_grad`).
The reward functions it hands the trainer are wrapped to record their scores (`reward_calls`,
harness/algorithms/grpo/reward_calls.py), and `generate` to say which generation they score;
each loss record names its rows' places in their generation batch (`completions`) and keeps their
sampled token ids (`completion_ids`), which with the run's `stop_token_id` say whether each ended
with the stop token.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch

from harness.errors import HarnessConfigError
from harness.targets.logged import LogTap

from ..logit_gaps import LogitGaps
from ..reward_calls import RewardTap

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


def _copy(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """A detached float64 CPU copy (bool stays bool)."""
    if tensor is None:
        return None
    tensor = tensor.detach().to("cpu")
    return tensor.clone() if tensor.dtype == torch.bool else tensor.to(torch.float64)


@dataclass
class ReferenceGRPORun:
    """A reference GRPOTrainer built for one scenario; satisfies TargetRun and records `loss_inputs`."""

    trainer: object
    module: types.ModuleType
    pad_token_id: int
    stop_token_id: int
    rank: int
    tap: LogTap
    log_steps: tuple[int, ...]
    rewards: RewardTap = field(default_factory=RewardTap)
    loss_inputs: list[dict] = field(default_factory=list)
    windows: int = 0
    generations: int = 0

    def __post_init__(self) -> None:
        micro_step, window_step, generate = self.trainer.micro_step, self.trainer.window_step, self.trainer.generate

        def recorded_generate():
            self.rewards.generation = self.generations
            try:
                return generate()
            finally:
                self.generations += 1

        def recorded_window_step(batch, micro_batches):
            try:
                return window_step(batch, micro_batches)
            finally:
                self.windows += 1

        def recorded_micro_step(batch, rows, denominator):
            seen = self._watch()
            try:
                result = micro_step(batch, rows, denominator)
            finally:
                self._unwatch(seen)
            self.loss_inputs.append(self._record(batch, rows, seen))
            return result

        self.trainer.window_step = recorded_window_step
        self.trainer.micro_step = recorded_micro_step
        self.trainer.generate = recorded_generate

    @property
    def reward_calls(self) -> list[dict]:
        """One record per call of a reward function the trainer was handed (reward_calls.py)."""
        return self.rewards.calls

    def _watch(self) -> dict:
        """Wrap the module's log-prob and entropy functions for one micro-step; returns what they will see."""
        seen: dict = {"originals": (self.module.selective_log_softmax, self.module.entropy_from_logits)}
        seen["gaps"] = LogitGaps()
        log_softmax, entropy = seen["gaps"].wrap(*seen["originals"])

        def selective_log_softmax(logits, index):
            out = log_softmax(logits, index)
            if "logps" not in seen:
                seen["logps"] = out
                if out.requires_grad:  # the gradient of the loss at the log-probs, as the backward pass delivers it
                    out.register_hook(lambda grad: seen.__setitem__("logp_grad", grad.detach().clone()))
            return out

        def entropy_from_logits(logits):
            out = entropy(logits)
            seen.setdefault("entropies", out)
            return out

        self.module.selective_log_softmax = selective_log_softmax
        self.module.entropy_from_logits = entropy_from_logits
        return seen

    def _unwatch(self, seen: dict) -> None:
        self.module.selective_log_softmax, self.module.entropy_from_logits = seen["originals"]

    def _record(self, batch, rows, seen: dict) -> dict:
        """One loss record (docs/architecture.md): float64 CPU copies of what the micro-step's loss used."""
        old = batch.old_per_token_logps
        ref = batch.ref_per_token_logps
        return {
            "generation": int(batch.index),
            "window": self.windows,
            "rank": self.rank,
            "completion_mask": _copy(batch.completion_mask[rows]).bool(),
            "completions": rows.detach().to("cpu", torch.int64).clone(),
            "completion_ids": batch.completion_ids[rows].detach().to("cpu", torch.int64).clone(),
            "logps": _copy(seen.get("logps")),
            "old_logps": None if old is None else _copy(old[rows]),
            "ref_logps": None if ref is None else _copy(ref[rows]),
            "advantages": _copy(batch.advantages[rows]),
            "entropies": _copy(seen.get("entropies")),
            "logit_gaps": seen["gaps"].gaps(),
            "logp_grad": _copy(seen.get("logp_grad")),
        }

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return getattr(self.trainer.optimizer, "optimizer", self.trainer.optimizer)

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.trainer.model.parameters() if p.requires_grad]

    def train(self) -> list[dict[str, float]]:
        """Every step; the metrics as the trainer logged them (callbacks and trackers) at `log_steps`."""
        return self.tap.logged(self.trainer.train(), steps=self.log_steps)


def factory(spec, accelerator=None) -> ReferenceGRPORun:
    """Build the reference GRPO trainer on the toy world of `spec` (a GRPOSpec), rewarded for token 7."""
    from accelerate import Accelerator

    from harness.targets.toy import toy_world
    from reference_ppo import ConfigError, grpo, toy

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
