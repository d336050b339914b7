"""The `trl` target: TRL 1.12.0's PPOTrainer (`trl.experimental.ppo`) on the toy world.

`factory(spec)` builds the toy models with `reference_trainers.toy.build_world`, maps the
ScenarioSpec onto TRL's own `PPOConfig` and returns a `TrlRun` (the TargetRun protocol
of docs/architecture.md). TRL is imported lazily so that the harness works without it.

`factory_for("my_pkg.ppo_trainer")` (what `--target trl:my_pkg.ppo_trainer` resolves to)
is the same adapter on another module with the names of `trl.experimental.ppo.ppo_trainer`
(`PPOTrainer`, `PPOConfig`, `masked_mean`, `selective_log_softmax`): a patched copy of
TRL's trainer, or the trainer of an installed TRL checkout under another name.

What TRL does that a caller of this target should know (TRL 1.12.0, accelerate 1.x):

- The rollout `logprob` site receives the scores returned by `generate`, i.e. the
  logits after the generation processors, which here is only the temperature warper:
  `logits / (temperature + 1e-7)`. The `ref_logprob` and `new_logprobs` sites divide
  by the same `temperature + 1e-7` explicitly.
- The micro-batch loop runs inside `accelerator.accumulate(model)` with the
  accelerator's own `gradient_accumulation_steps`; its counter is not reset at
  minibatch boundaries, so the optimizer step does not line up with minibatches when
  a minibatch does not hold exactly `gradient_accumulation_steps` micro-batches
  (a micro-batch's gradient can be left in `.grad` at the end of an update and is
  applied in the next one). On the update that draws the last batch of the prompt
  dataloader, accelerate steps after every micro-batch and resets its counter.
- `generate` stops when every row has produced the stop token, so the response
  width can be shorter than `response_length`.
- A micro-batch whose rows are all empty responses gives `masked_mean` 0/0 = nan.
"""

from __future__ import annotations

import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.algorithms.ppo.spec import ScenarioSpec
from harness.errors import HarnessConfigError
from harness.targets.hf import import_trainer_module, metrics_callback
from harness.targets.hf import quiet as _quiet
from harness.targets.hf import world_size as _world_size

TRL_MODULE = "trl.experimental.ppo.ppo_trainer"
MODULE_NAMES = ("PPOTrainer", "PPOConfig", "masked_mean", "selective_log_softmax")
"""What a module handed to `factory_for` must have, as TRL's trainer module has them."""


NO_PPO = (
    "and it has no PPOTrainer (TRL removed it in 1.13.0): the PPO adapter runs on trl 1.12.0 (pip install "
    "'ppo-stats-harness[trl-ppo]', or nox -s verify -- --target trl, which installs it), or on a trainer module "
    "with TRL's names (--target trl:MODULE)"
)
"""What the `trl` target says where the installed TRL has no PPO trainer module."""


def _import_trl(module: str | None = None):
    """The PPO trainer module and its config class (TRL's own, or `module`'s), or HarnessConfigError."""
    trainer = import_trainer_module(module, TRL_MODULE, MODULE_NAMES, "trl", absent=NO_PPO)
    return trainer, trainer.PPOConfig


@dataclass
class TrlRun:
    """One TRL PPO run, ready to `train()` once."""

    module: types.ModuleType
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    pad_token_id: int
    stop_token_id: int
    trainer: object
    spec: ScenarioSpec
    _metrics: list[dict[str, float]] = field(default_factory=list)
    _workdir: tempfile.TemporaryDirectory | None = None
    _trained: bool = False
    models: dict[str, torch.nn.Module] = field(repr=False, default_factory=dict)
    """The policy, reference and value model handed to TRL's PPOTrainer (the harness recomputes with copies)."""
    prompts: torch.Tensor | None = field(repr=False, default=None)
    """The prompts of TRL's training dataset."""

    @property
    def value_head(self) -> torch.nn.Module:
        """The value model's `score` head (a sequence-classification model's): its output per position is
        recorded, under no_grad in the rollout (old values) and with autograd in each micro-batch (new values)."""
        return self.trainer.accelerator.unwrap_model(self.trainer.model).value_model.score

    @property
    def reward_model(self) -> torch.nn.Module:
        """TRL's reward model: the harness records its head's output per position and the ids of the rows it
        scored, and the oracle reads each row's score at its last real token, so TRL's own choice is checked."""
        return self.trainer.reward_model

    def train(self) -> list[dict[str, float]]:
        """Run all updates; one dict of TRL's logged `group/name` metrics per update."""
        if self._trained:
            raise RuntimeError("a TrlRun trains once; build a new one with factory(spec)")
        self._trained = True
        try:
            with _quiet():
                self.trainer.train()
        finally:
            if self._workdir is not None:
                self._workdir.cleanup()
                self._workdir = None
        if len(self._metrics) != self.spec.total_updates:
            raise RuntimeError(f"TRL logged {len(self._metrics)} metric dicts for {self.spec.total_updates} updates")
        return [dict(m) for m in self._metrics]


def _metrics_callback(sink: list[dict[str, float]]):
    """A callback that keeps every `group/name` entry of each `log` call, as floats."""
    return metrics_callback(sink, lambda logs, state: {k: float(v) for k, v in logs.items() if "/" in k})


def factory_for(module: str) -> Callable[[ScenarioSpec], TrlRun]:
    """The factory of `--target trl:MODULE`: this adapter on `module` instead of TRL's installed trainer."""

    def trl_module_factory(spec: ScenarioSpec) -> TrlRun:
        return factory(spec, module=module)

    trl_module_factory.module = module
    return trl_module_factory


def factory(spec: ScenarioSpec, module: str | None = None) -> TrlRun:
    """Build TRL's PPOTrainer (or `module`'s) for `spec` on the toy world (offline, no downloads)."""
    ppo_trainer, PPOConfig = _import_trl(module)
    import transformers
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from harness.targets.toy import toy_world

    transformers.set_seed(spec.seed)  # TRL draws its minibatch permutation from numpy
    world = toy_world(spec, prompt_pads=spec.prompt_pads)  # validates device and dtype
    dataset = Dataset.from_dict({"input_ids": world.prompts.tolist()})

    workdir = tempfile.TemporaryDirectory(prefix="ppo-harness-trl-", ignore_cleanup_errors=True)
    local_batch = spec.local_batch_size
    with _quiet():
        config = PPOConfig(
            output_dir=workdir.name,
            per_device_train_batch_size=spec.per_device_train_batch_size,
            gradient_accumulation_steps=spec.gradient_accumulation_steps,
            num_mini_batches=spec.num_mini_batches,
            num_ppo_epochs=spec.num_ppo_epochs,
            total_episodes=spec.total_updates * local_batch * _world_size(),
            learning_rate=spec.learning_rate,
            lr_scheduler_type="constant",
            warmup_steps=0,
            seed=spec.seed,
            response_length=spec.response_length,
            temperature=spec.temperature,
            stop_token_id=world.stop_token_id,
            kl_coef=spec.kl_coef,
            kl_estimator=spec.kl_estimator,
            cliprange=spec.cliprange,
            cliprange_value=spec.cliprange_value,
            vf_coef=spec.vf_coef,
            gamma=spec.gamma,
            lam=spec.lam,
            whiten_rewards=spec.whiten_rewards,
            missing_eos_penalty=spec.missing_eos_penalty,
            max_grad_norm=spec.max_grad_norm if spec.max_grad_norm is not None else 0.0,  # 0: no clipping
            local_rollout_forward_batch_size=spec.rollout_chunk,
            num_sample_generations=0,
            report_to=[],
            save_strategy="no",
            use_cpu=spec.device == "cpu",
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            disable_tqdm=True,
            logging_strategy="steps",
            logging_steps=1,
            dataloader_num_workers=0,
            push_to_hub=False,
        )
        trainer = ppo_trainer.PPOTrainer(
            args=config,
            processing_class=world.tokenizer,
            model=world.policy,
            ref_model=world.ref_policy,
            reward_model=world.reward_model,
            train_dataset=dataset,
            value_model=world.value_model,
        )
    for noisy in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(noisy)
    metrics: list[dict[str, float]] = []
    trainer.add_callback(_metrics_callback(metrics))

    if trainer.args.num_total_batches != spec.total_updates:
        raise HarnessConfigError(
            f"TRL plans {trainer.args.num_total_batches} updates, the scenario asks for {spec.total_updates}"
        )

    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    model = trainer.accelerator.unwrap_model(trainer.model)
    params = [p for p in model.parameters() if p.requires_grad]
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if {id(p) for p in params} != in_optimizer:
        raise RuntimeError("TRL's optimizer does not hold exactly the trainable policy and value parameters")

    return TrlRun(
        module=ppo_trainer,
        optimizer=optimizer,
        params=params,
        pad_token_id=world.pad_token_id,
        stop_token_id=world.stop_token_id,
        trainer=trainer,
        spec=spec,
        _metrics=metrics,
        _workdir=workdir,
        models={"policy": world.policy, "ref_policy": world.ref_policy, "value_model": world.value_model},
        prompts=world.prompts,
    )
