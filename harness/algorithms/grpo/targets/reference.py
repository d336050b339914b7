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
`stop_token_id` say whether each ended with the stop token. The run exposes the networks and prompts it handed
the trainer (`models`, `prompts`) for the forward recompute. Every wrapper is put back after `train()`.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from harness.errors import HarnessConfigError
from harness.instrument.loss import LossRecord
from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.reward_calls import RewardTap
from harness.targets.logged import LogTap

from ..spec import ADAM, GRPOSpec


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
    models: dict[str, torch.nn.Module] = field(default_factory=dict)
    """The networks handed to the trainer ("policy", and "ref_policy" when beta is not 0): the forward recompute
    calls float64 copies of them, taken before training."""
    prompts: torch.Tensor | None = None
    """The (N, P) prompts handed to the trainer."""
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
        def recorded_window_step(*args, **kwargs):
            try:
                return window_step(*args, **kwargs)
            finally:
                self.windows += 1

        return recorded_window_step

    def _fields(self, batch, rows, denominator) -> dict[str, Any]:
        return micro_step_fields(batch, rows, self.windows, self.rank)

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


def micro_step_fields(batch, rows, window: int, rank: int) -> dict[str, Any]:
    """What the reference trainer's `micro_step(batch, rows, denominator)` arguments say of its loss record, in
    optimizer step `window` on `rank` (the recorder copies the tensors)."""
    old, ref = batch.old_per_token_logps, batch.ref_per_token_logps
    return {
        "generation": int(batch.index),
        "window": window,
        "rank": rank,
        "completion_mask": batch.completion_mask[rows],
        "completions": rows,
        "completion_ids": batch.completion_ids[rows],
        "old_logps": None if old is None else old[rows],
        "ref_logps": None if ref is None else ref[rows],
        "advantages": batch.advantages[rows],
    }


def config_fields(config_class) -> tuple[str, ...]:
    """The GRPOSpec fields handed to the reference GRPOConfig under the same names: every init field the two
    share (both carry TRL's names), so a setting added to both reaches the trainer without a list to keep."""
    spec_fields = {f.name for f in fields(GRPOSpec)}
    return tuple(f.name for f in fields(config_class) if f.init and f.name in spec_fields)


def factory(spec, accelerator=None) -> ReferenceGRPORun:
    """Build the reference GRPO trainer on the toy world of `spec` (a GRPOSpec), rewarded for token 7."""
    from accelerate import Accelerator

    from harness.targets.toy import toy_world
    from reference_trainers import ConfigError, grpo, toy

    world = toy_world(spec, prompt_pads=spec.prompt_pads)  # prompt i starts with i % (prompt_pads + 1) pads
    try:
        settings = {name: getattr(spec, name) for name in config_fields(grpo.GRPOConfig)}
        settings = {k: v for k, v in settings.items() if not (v is None and k in ADAM)}
        # the weights in the order the functions are handed over (reward_order), each function's its own
        config = grpo.GRPOConfig(stop_token_id=world.stop_token_id,
                                 **{**settings, "reward_weights": spec.handed_weights})
    except ConfigError as exc:
        raise HarnessConfigError(f"reference-grpo target: {exc}") from None
    accelerator, tap = accelerator or Accelerator(cpu=spec.device == "cpu"), LogTap()
    tap.attach(accelerator)
    rewards = RewardTap(rank=accelerator.process_index)
    trainer = grpo.GRPOTrainer(
        config,
        world.policy,
        world.ref_policy if spec.beta != 0 else None,
        handed_rewards(spec, world, rewards, toy.count_token_reward(7)),
        world.prompts,
        world.pad_token_id,
        callbacks=[tap.callback],
        accelerator=accelerator,
    )
    models = {"policy": world.policy, **({"ref_policy": world.ref_policy} if spec.beta != 0 else {})}
    steps = log_steps(spec.max_steps, spec.logging_steps)
    return ReferenceGRPORun(trainer, grpo, world.pad_token_id, world.stop_token_id, accelerator.process_index, tap,
                            steps, rewards, models, world.prompts)  # fmt: skip


def completions_given(args: tuple, kwargs: dict) -> torch.Tensor:
    """The completions a reward function of the reference trainer is given: its second argument, (N, T) ids."""
    return args[1]


def prompts_given(args: tuple, kwargs: dict) -> torch.Tensor:
    """The prompts a reward function of the reference trainer is given: its first argument, (N, P) ids."""
    return args[0]


def handed_rewards(spec, world, tap: RewardTap, count_w7):
    """The reward functions as the reference trainer is handed them, in each of the three forms it accepts, so
    that the gate runs each: one function alone; two in a list (named by their `__name__`); a reward model beside
    a function in a dict, name -> function or model (`spec.reward_model`). Each function is wrapped by `tap`, the
    model watched by it, in the order handed over: under `spec.reward_order` 'reversed' the stop reward first, the
    count second (the trainer's weights are `spec.handed_weights`, in the same order)."""
    if spec.reward_model:
        scored = rewards_named(count_w7, "count_w7")
        return {"count_w7": tap.wrap("count_w7", scored, inputs=completions_given, prompts=prompts_given),
                "reward_model": tap.watch("reward_model", world.reward_model, world.pad_token_id)}  # fmt: skip
    funcs = list(toy_rewards(len(spec.reward_weights or (1.0,)), world.stop_token_id, count_w7).items())
    if spec.reward_order == "reversed":
        funcs.reverse()
    wrapped = [tap.wrap(name, f, inputs=completions_given, prompts=prompts_given) for name, f in funcs]
    return wrapped[0] if len(wrapped) == 1 else wrapped


def rewards_named(func, name: str):
    """`func` under `name` (the trainer names a function it is handed alone or in a list by its `__name__`)."""

    def named(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        return func(queries, responses)

    named.__name__ = named.__qualname__ = name
    return named


def toy_rewards(count: int, stop_token_id: int, count_w7) -> dict:
    """The toy world's reward functions: token 7's count (`count_w7`), which scores every completion; or, for two
    weights, that count and whether the completion ended with the stop token (1 or 0), each unable to score some
    completions (NaN): the count where the first token is a multiple of 4 (pad, an empty completion, included),
    the stop where it is that or odd. So about a quarter of the completions get no score at all, half of them one,
    and rewards tie often enough that some groups have std 0."""
    if count == 1:
        return {"count_w7": rewards_named(count_w7, "count_w7")}
    nan = float("nan")

    def count_w7_partial(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        return count_w7(queries, responses).masked_fill(responses[:, 0] % 4 == 0, nan)

    def stopped_partial(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        first = responses[:, 0]
        stopped = (responses == stop_token_id).any(dim=1).to(torch.float32)
        return stopped.masked_fill((first % 4 == 0) | (first % 2 == 1), nan)

    return {"count_w7": rewards_named(count_w7_partial, "count_w7"),
            "stopped": rewards_named(stopped_partial, "stopped")}  # fmt: skip


def log_steps(max_steps: int, logging_steps: int) -> tuple[int, ...]:
    """The optimizer steps at which a GRPO trainer logs: every `logging_steps`-th, and the last if it is not one."""
    steps = tuple(range(logging_steps, max_steps + 1, logging_steps))
    return steps if max_steps % logging_steps == 0 else (*steps, max_steps)


factory.algorithm = "grpo"
factory.optional_metrics = ("policy_loss",)  # the reference logs it: a run that does not fails the pooled checks
factory.definitions = {"partial_last_interval": "logged"}  # it logs a partial last interval (docs/grpo-metrics.md)
