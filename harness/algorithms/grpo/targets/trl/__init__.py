"""The `trl-grpo` target: TRL's GRPOTrainer (releases 1.12.0 to 1.16.0) on the toy world, offline, on CPU or CUDA.

`build(spec)` maps a GRPO run spec (the field names of `reference_ppo.grpo_config.GRPOConfig`,
which are TRL's, plus `seed`, `device`, `dtype`) onto TRL's own `GRPOConfig` (config.py), builds the
trainer on the toy models of `reference_ppo.toy` with deterministic reward functions and a small
in-memory prompt dataset (world.py), and returns a `TrlGRPORun` (the TargetRun protocol of
docs/architecture.md, plus `loss_inputs` and `reward_calls`). TRL is imported lazily so that the
harness works without it.

`build_for("my_pkg.grpo_trainer")` (what `--target trl-grpo:my_pkg.grpo_trainer` resolves to) is the
same adapter on another module with the names of `trl.trainer.grpo_trainer` (`GRPOTrainer`,
`GRPOConfig`, and the functions of one release's log-probs and entropies, entry.py).

What the run records (recording.py): one `LossRecord` per micro-batch of the loss, in the order they
ran, with detached CPU copies of what TRL's `_compute_loss` was fed and computed, the largest gaps of
its log-probs and entropies to their float64 recomputations from what the functions that computed
them were given, logits or the fused head's hidden states and weights (`logit_gaps`), the
gradient its backward pass delivered to those log-probs (`logp_grad`), and which completions of their
generation batch the rows are (`completions`) with their token ids; and one `RewardCall` per call of a
reward function handed to TRL. It exposes TRL's policy and reference model and the prompts' token ids (`models`,
`prompts`) for the forward recompute. The wrappers call TRL's own methods and functions with the same
arguments, return what they return, and are put back after `train()`. docs/trl-grpo.md says what TRL
logs from them, measured.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.errors import HarnessConfigError
from harness.instrument.loss import LossRecord, RewardCall
from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.reward_calls import RewardTap
from harness.targets.hf import import_trainer_module, metrics_callback, quiet

from . import entry, recording, world
from .config import trl_args

TRL_MODULE = "trl.trainer.grpo_trainer"
MODULE_NAMES = ("GRPOTrainer", "GRPOConfig")
"""What a module handed to `build_for` must have, as TRL's trainer module has them (and one release's functions
of the log-probs and entropies, entry.py)."""


@dataclass
class TrlGRPORun:
    """One TRL GRPO run, ready to `train()` once."""

    module: types.ModuleType
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    pad_token_id: int
    stop_token_id: int
    trainer: Any
    spec: Any
    recorder: LossRecorder
    reward_calls: list[RewardCall] = field(default_factory=list)
    """One record per call of a reward function handed to TRL."""
    models: dict[str, torch.nn.Module] = field(default_factory=dict)
    """TRL's policy and reference model ("policy", "ref_policy" when beta is not 0), unwrapped: the forward
    recompute calls float64 copies of them, taken before training."""
    prompts: torch.Tensor | None = None
    """The (N, P) token ids of the dataset's prompts, as the toy tokenizer encodes them, left-padded to the toy
    world's prompt length (the dataset holds each prompt's real tokens alone; TRL pads a batch's prompts itself)."""
    _metrics: list[dict[str, float]] = field(default_factory=list)
    _workdir: tempfile.TemporaryDirectory | None = None
    _trained: bool = False

    @property
    def loss_inputs(self) -> tuple[LossRecord, ...]:
        """One record per micro-batch of TRL's loss, in the order they ran."""
        return self.recorder.records

    def train(self) -> list[dict[str, float]]:
        """Run `max_steps` optimizer steps; one dict of TRL's logged metrics per log, with TRL's names."""
        if self._trained:
            raise RuntimeError("a TrlGRPORun trains once; build a new one with build(spec)")
        self._trained = True
        try:
            with quiet(), self.recorder:
                self.trainer.train()
        finally:
            if self._workdir is not None:
                self._workdir.cleanup()
                self._workdir = None
        return [dict(m) for m in self._metrics]


def _logged(logs, state) -> dict[str, float] | None:
    """The numeric entries of a training `log` call, with the optimizer steps so far as `step` (as the reference
    logs it); None for the final summary (with `train_runtime`)."""
    if "train_runtime" in logs:
        return None
    entry = {k: float(v) for k, v in logs.items() if isinstance(v, int | float)}
    entry["step"] = float(state.global_step)
    return entry


def build_for(module: str) -> Callable[[Any], TrlGRPORun]:
    """The target of `trl-grpo:MODULE`: this adapter on `module` instead of TRL's installed GRPO trainer."""

    def trl_module_build(spec) -> TrlGRPORun:
        return build(spec, module=module)

    trl_module_build.module = module
    return trl_module_build


def build(
    spec, module: str | None = None, extra: dict[str, Any] | None = None, generations_per_epoch: int = 1
) -> TrlGRPORun:
    """TRL's GRPOTrainer (or `module`'s) for `spec` on the toy world.

    `extra`: more TRL GRPOConfig settings (e.g. `entropy_coef`, with which TRL logs `policy_loss`).
    `generations_per_epoch`: generation batches in the prompt dataset. With 1 (the default) every epoch of
    TRL's loop is one generation, so the last accumulation window of a generation is short when
    `steps_per_generation * num_iterations` is not a multiple of `gradient_accumulation_steps` (as in
    the reference trainer); with more, TRL's one step counter lets a window hold micro-batches of two
    generations (docs/trl-grpo.md). A spec with `windows_across_generations` gets every generation it trains in
    one epoch.
    """
    grpo_trainer = import_trainer_module(module, TRL_MODULE, MODULE_NAMES, "trl-grpo")
    points = entry.entry_points(grpo_trainer)
    import transformers
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from harness.targets.toy import toy_world

    stop = getattr(spec, "stop_token_id", None)
    if getattr(spec, "windows_across_generations", False):  # no epoch's end cuts a window short
        generations_per_epoch = max(generations_per_epoch, world.generations_trained(spec))
    world_spec = world.world_spec(spec, generations_per_epoch)
    transformers.set_seed(spec.seed)
    toy = toy_world(world_spec, prompt_pads=world_spec.prompt_pads)  # validates device and dtype
    if stop is not None and stop != toy.stop_token_id:
        raise HarnessConfigError(
            f"trl-grpo target: TRL stops completions at the tokenizer's EOS ({toy.stop_token_id}), not {stop}"
        )
    biases = world.logit_biases(spec, toy)
    for model in (toy.policy, toy.ref_policy):
        world.add_logit_biases(model, biases)
    prompts = world.prompt_texts(toy.prompts, toy.pad_token_id)  # real tokens only: TRL left-pads them itself
    dataset = Dataset.from_dict({"prompt": prompts})

    workdir = tempfile.TemporaryDirectory(prefix="grpo-harness-trl-", ignore_cleanup_errors=True)
    with quiet(), contextlib.redirect_stderr(io.StringIO()):  # progress bars of saving and loading weights
        if spec.beta != 0:
            # TRL rebuilds its reference model from the policy's `_name_or_path`: point it at the toy world's
            # independent reference (its EOS bias is added again below: from_pretrained drops it).
            reference_dir = os.path.join(workdir.name, "reference")
            # every rank saves its own copy into its own folder: transformers writes only on rank 0 of a process
            # group (should_save_on_this_rank), which would leave the other ranks' folders empty
            toy.ref_policy.should_save_on_this_rank = lambda is_main_process: True
            toy.ref_policy.save_pretrained(reference_dir)
            toy.policy.config._name_or_path = reference_dir
        config = grpo_trainer.GRPOConfig(**trl_args(spec, workdir.name, dict(extra or {})))
        rewards = RewardTap()
        funcs = [rewards.wrap(f.__name__, f, world.completions_given) for f in world.toy_rewards(spec)]
        processing = {}
        if getattr(spec, "reward_model", False):
            # TRL names a reward model by its `_name_or_path` and scores it on the decoded text, tokenized
            toy.reward_model.config._name_or_path = world.REWARD_MODEL
            funcs.append(rewards.watch(world.REWARD_MODEL, toy.reward_model, toy.pad_token_id,
                                       special_ids=tuple(toy.tokenizer.all_special_ids)))  # fmt: skip
            processing = {"reward_processing_classes": [None] * (len(funcs) - 1) + [toy.tokenizer]}
        trainer = grpo_trainer.GRPOTrainer(
            model=toy.policy,
            reward_funcs=funcs,
            args=config,
            train_dataset=dataset,
            processing_class=toy.tokenizer,
            **processing,
        )
    if trainer.ref_model is not None:
        world.add_logit_biases(trainer.accelerator.unwrap_model(trainer.ref_model), biases)
    for noisy in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(noisy)
    metrics: list[dict[str, float]] = []
    trainer.add_callback(metrics_callback(metrics, _logged))
    rewards.rank = int(trainer.accelerator.process_index)

    trainer.create_optimizer_and_scheduler(num_training_steps=spec.max_steps)
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    model = trainer.accelerator.unwrap_model(trainer.model)
    params = [p for p in model.parameters() if p.requires_grad]
    models = {"policy": model}
    if trainer.ref_model is not None:
        models["ref_policy"] = trainer.accelerator.unwrap_model(trainer.ref_model)
    return TrlGRPORun(
        module=grpo_trainer,
        optimizer=optimizer,
        params=params,
        pad_token_id=toy.pad_token_id,
        stop_token_id=toy.stop_token_id,
        trainer=trainer,
        spec=spec,
        recorder=recording.recorder(trainer, grpo_trainer, rewards, points),
        reward_calls=rewards.calls,
        models=models,
        prompts=world.encoded_prompts(toy.tokenizer, prompts, toy.prompts, toy.pad_token_id),
        _metrics=metrics,
        _workdir=workdir,
    )
