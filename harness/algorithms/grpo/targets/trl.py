"""The `trl-grpo` target: TRL 1.12.0's GRPOTrainer on the toy world, offline, on CPU or CUDA.

`build(spec)` maps a GRPO run spec (the field names of `reference_ppo.grpo_config.GRPOConfig`,
which are TRL's, plus `seed`, `device`, `dtype`) onto TRL's own `GRPOConfig`, builds the trainer on
the toy models of `reference_ppo.toy` with a deterministic reward function and a small in-memory
prompt dataset, and returns a `TrlGRPORun` (the TargetRun protocol of docs/architecture.md, plus
`loss_inputs`). TRL is imported lazily so that the harness works without it.

`build_for("my_pkg.grpo_trainer")` (what `--target trl-grpo:my_pkg.grpo_trainer` resolves to) is the
same adapter on another module with the names of `trl.trainer.grpo_trainer` (`GRPOTrainer`,
`GRPOConfig`, `selective_log_softmax`, `entropy_from_logits`).

What the run records (`loss_inputs`), one dict per micro-batch of the loss in the order they ran,
every tensor a detached float64 CPU copy: the `inputs` TRL's `_compute_loss(model, inputs)`
received (`completion_mask`, times the tool mask when there is one; `advantages`;
`old_per_token_logps`, absent on on-policy steps; `ref_per_token_logps`, when `beta != 0`) and what
its call of `_get_per_token_logps_and_entropies` returned (`logps`, `entropies`), and the largest
gaps between what the module's `selective_log_softmax` and `entropy_from_logits` returned in that
call and their float64 recomputations from the logits (`logit_gaps`), the gradient the backward
pass of that micro-batch delivered to those log-probs (`logp_grad`, a tensor hook; the key is absent
when no backward pass reached them), and which completions of their generation batch the rows are
(`completions`, found by their prompt and completion ids in what `_generate_and_score_completions`
returned) and their token ids (`completion_ids`, int64, padded as TRL pads them). The reward
functions handed to TRL are wrapped to record every score (`reward_calls`,
harness/algorithms/grpo/reward_calls.py). The wrappers call TRL's own methods and functions with the
same arguments and return what they return. docs/trl-grpo.md says what TRL logs from them, measured.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import tempfile
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.algorithms.ppo.targets.trl import _quiet
from harness.errors import HarnessConfigError

from ..logit_gaps import LogitGaps
from ..reward_calls import RewardTap

TRL_VERSION = "1.12.0"
_MISSING = f"trl-grpo target needs trl=={TRL_VERSION}: pip install 'ppo-stats-harness[trl]'"

TRL_MODULE = "trl.trainer.grpo_trainer"
MODULE_NAMES = ("GRPOTrainer", "GRPOConfig", "selective_log_softmax", "entropy_from_logits")
"""What a module handed to `build_for` must have, as TRL's trainer module has them."""

# The toy world of this target: fixed, so that a spec needs only the trainer's settings.
VOCAB_SIZE = 32
PROMPT_LENGTH = 6
EOS_LOGIT_BIAS = 2.0
"""Added to the EOS logit of the policy and the reference: completions of 8 tokens end at uneven lengths
(about one token in five is EOS), and some run to the limit (truncated)."""

SPEC_FIELDS = tuple(
    "per_device_train_batch_size gradient_accumulation_steps steps_per_generation num_generations num_iterations "
    "max_steps logging_steps learning_rate max_completion_length temperature loss_type beta seed device dtype".split()
)
"""The spec attributes a run cannot be built without; the others default as in reference_ppo's GRPOConfig."""


def toy_reward(completion_ids: list[list[int]], **kwargs) -> list[float]:
    """The number of completion tokens whose id is a multiple of 3 (EOS excluded): deterministic, uneven in a group."""
    return [float(sum(1 for t in ids if t % 3 == 0 and t > 2)) for ids in completion_ids]


def multiple_of_3_partial(completion_ids: list[list[int]], **kwargs) -> list[float | None]:
    """1 for a completion with a token whose id is a multiple of 3 (EOS excluded), else 0: rewards tie, so some
    groups have std 0. None (cannot score) for a completion whose first token is a multiple of 4, or that is empty."""
    return [
        None if not ids or ids[0] % 4 == 0 else float(s > 0)
        for ids, s in zip(completion_ids, toy_reward(completion_ids))
    ]


def stopped_partial(completion_ids: list[list[int]], **kwargs) -> list[float | None]:
    """1 for a completion that ends with EOS, else 0; None where its first token is a multiple of 4 or odd."""
    stop = kwargs.get("eos_token_id", 1)
    return [None if not ids or ids[0] % 4 == 0 or ids[0] % 2 == 1 else float(ids[-1] == stop) for ids in completion_ids]


def toy_rewards(spec) -> list[Callable]:
    """The reward functions of the spec's `reward_weights`: `toy_reward` for one weight (or none); for two, the two
    partial ones (the reference target's toy world has the same pattern: some completions neither can score)."""
    weights = _spec_value(spec, "reward_weights")
    return [toy_reward] if weights is None or len(weights) == 1 else [multiple_of_3_partial, stopped_partial]


def _import_trl(module: str | None = None):
    """The GRPO trainer module (TRL's own, or `module`), or HarnessConfigError."""
    name = module or TRL_MODULE
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = importlib.import_module(name)
    except ImportError as exc:  # trl missing (or `requests`, which its import needs), or no such module
        if module is None:
            raise HarnessConfigError(f"{_MISSING} ({exc})") from exc
        raise HarnessConfigError(f"trl-grpo target: cannot import {module!r} ({exc})") from exc
    missing = [n for n in MODULE_NAMES if not callable(getattr(trainer, n, None))]
    if missing:
        raise HarnessConfigError(
            f"trl-grpo target: module {name!r} has no {', '.join(missing)} (it needs the names of {TRL_MODULE})"
        )
    return trainer


def _spec_value(spec, name: str, default: Any = None) -> Any:
    return getattr(spec, name, default)


def _trl_args(spec, output_dir: str, extra: dict[str, Any]) -> dict[str, Any]:
    """TRL GRPOConfig keyword arguments for `spec` (HarnessConfigError naming a field the spec lacks)."""
    lacking = [name for name in SPEC_FIELDS if not hasattr(spec, name)]
    if lacking:
        raise HarnessConfigError(f"trl-grpo target: the run spec has no {', '.join(lacking)}")
    epsilon_low = _spec_value(spec, "epsilon_low", _spec_value(spec, "epsilon", 0.2))
    max_grad_norm = _spec_value(spec, "max_grad_norm")
    reward_weights = _spec_value(spec, "reward_weights")
    args = dict(
        output_dir=output_dir,
        per_device_train_batch_size=spec.per_device_train_batch_size,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        steps_per_generation=spec.steps_per_generation or spec.gradient_accumulation_steps,
        num_generations=spec.num_generations,
        num_iterations=spec.num_iterations,
        max_steps=spec.max_steps,
        logging_steps=spec.logging_steps,
        learning_rate=spec.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        weight_decay=0.0,
        max_completion_length=spec.max_completion_length,
        temperature=spec.temperature,
        loss_type=spec.loss_type,
        beta=spec.beta,
        use_bias_correction_kl=_spec_value(spec, "use_bias_correction_kl", True),
        epsilon=epsilon_low,
        epsilon_high=_spec_value(spec, "epsilon_high", epsilon_low),
        delta=_spec_value(spec, "delta"),
        scale_rewards=_spec_value(spec, "scale_rewards", "group"),
        reward_weights=list(reward_weights) if reward_weights is not None else None,
        max_grad_norm=max_grad_norm if max_grad_norm is not None else 0.0,  # 0: no clipping
        seed=spec.seed,
        data_seed=spec.seed,
        model_init_kwargs={"dtype": spec.dtype},  # the reference model TRL rebuilds when beta != 0
        use_vllm=False,
        use_cpu=spec.device == "cpu",
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="steps",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
        push_to_hub=False,
        # The spec's pad bias asks for empty completions. TRL's mask keeps every token up to its EOS, a sampled
        # pad included, so the one way TRL empties a completion is masking it when truncated.
        mask_truncated_completions=bool(_spec_value(spec, "pad_logit_bias", 0.0)),
    )
    args.update(extra)
    return args


def _prompt_count(spec, generations_per_epoch: int) -> int:
    """Prompts in the dataset: `generations_per_epoch` generation batches (each rank's share, every rank)."""
    steps_per_generation = spec.steps_per_generation or spec.gradient_accumulation_steps
    completions = spec.per_device_train_batch_size * steps_per_generation * _world_size()
    if completions % spec.num_generations:
        raise HarnessConfigError(
            f"trl-grpo target: a generation batch of {completions} completions is not a whole number of "
            f"groups of num_generations={spec.num_generations}"
        )
    return generations_per_epoch * completions // spec.num_generations


def _world_size() -> int:
    """Processes launched for this run (torchrun / accelerate launch set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _copy(value: torch.Tensor | None) -> torch.Tensor | None:
    return None if value is None else value.detach().to("cpu", torch.float64, copy=True)


@dataclass
class _Recorder:
    """Wraps a trainer's `_compute_loss` and `_get_per_token_logps_and_entropies` to keep their inputs and outputs."""

    trainer: Any
    sink: list[dict[str, Any]]
    module: types.ModuleType
    rewards: RewardTap = field(default_factory=RewardTap)
    generations: int = 0
    _rows: dict[int, dict[tuple, list[int]]] = field(default_factory=dict)
    _used: dict[tuple[int, tuple], int] = field(default_factory=dict)
    _gaps: LogitGaps = field(default_factory=LogitGaps)
    _inside_loss: bool = False
    _seen: list[tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=list)
    _slot: dict[str, Any] = field(default_factory=dict)

    def install(self) -> None:
        compute_loss = self.trainer._compute_loss
        logps_and_entropies = self.trainer._get_per_token_logps_and_entropies
        generate = self.trainer._generate_and_score_completions

        def recorded_generate(inputs):
            training = self.trainer.model.training
            if training:
                self.generations += 1
                self.rewards.generation = self.generations - 1
            output = generate(inputs)
            if training:
                self._rows[self.generations - 1] = rows = {}
                for i, key in enumerate(_row_keys(output)):
                    rows.setdefault(key, []).append(i)
            return output

        def recorded_logps(*args, **kwargs):
            out = logps_and_entropies(*args, **kwargs)
            if self._inside_loss:
                self._seen.append((_copy(out[0]), _copy(out[1])))
                if out[0].requires_grad:  # the backward pass (after the loss returns) fills the record's logp_grad
                    slot = self._slot
                    out[0].register_hook(lambda grad: slot.__setitem__("logp_grad", _copy(grad)))
            return out

        def recorded_loss(model, inputs):
            self._inside_loss, self._seen, self._gaps, self._slot = True, [], LogitGaps(), {}
            originals = (self.module.selective_log_softmax, self.module.entropy_from_logits)
            self.module.selective_log_softmax, self.module.entropy_from_logits = self._gaps.wrap(*originals)
            try:
                loss = compute_loss(model, inputs)
            finally:
                self._inside_loss = False
                self.module.selective_log_softmax, self.module.entropy_from_logits = originals
            if self.trainer.model.training:
                self._keep(inputs)
            return loss

        self.trainer._generate_and_score_completions = recorded_generate
        self.trainer._get_per_token_logps_and_entropies = recorded_logps
        self.trainer._compute_loss = recorded_loss

    def _keep(self, inputs: dict[str, Any]) -> None:
        if len(self._seen) != 1:
            raise RuntimeError(f"TRL's loss computed log-probs {len(self._seen)} times in one micro-batch, not once")
        logps, entropies = self._seen[0]
        generation = self.generations - 1
        completions = []
        for key in _row_keys(inputs):
            places = self._rows.get(generation, {}).get(key, [-1])
            seen = self._used.get((generation, key), 0)  # identical rows take their places in turn
            self._used[(generation, key)] = seen + 1
            completions.append(places[seen % len(places)])
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        record = self._slot  # the dict the log-probs' gradient hook writes `logp_grad` into
        record.update(
            {
                "generation": generation,
                "window": int(self.trainer.state.global_step),
                "rank": int(self.trainer.accelerator.process_index),
                "completion_mask": mask.detach().to("cpu").bool(),
                "completions": torch.tensor(completions, dtype=torch.int64),
                "completion_ids": inputs["completion_ids"].detach().to("cpu", torch.int64, copy=True),
                "logps": logps,
                "old_logps": _copy(inputs.get("old_per_token_logps")),
                "ref_logps": _copy(inputs.get("ref_per_token_logps")),
                "advantages": _copy(inputs["advantages"]),
                "entropies": entropies,
                "logit_gaps": self._gaps.gaps(),
            }
        )
        self.sink.append(record)


def _row_keys(batch: dict[str, Any]) -> list[tuple]:
    """Each row's prompt ids, then -1, then its completion ids (pads included): what tells the rows apart."""
    return [(*p, -1, *c) for p, c in zip(batch["prompt_ids"].tolist(), batch["completion_ids"].tolist())]


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
    loss_inputs: list[dict[str, Any]] = field(default_factory=list)
    reward_calls: list[dict[str, Any]] = field(default_factory=list)
    """One record per call of a reward function handed to TRL (reward_calls.py)."""
    _metrics: list[dict[str, float]] = field(default_factory=list)
    _workdir: tempfile.TemporaryDirectory | None = None
    _trained: bool = False

    def train(self) -> list[dict[str, float]]:
        """Run `max_steps` optimizer steps; one dict of TRL's logged metrics per log, with TRL's names."""
        if self._trained:
            raise RuntimeError("a TrlGRPORun trains once; build a new one with build(spec)")
        self._trained = True
        try:
            with _quiet():
                self.trainer.train()
        finally:
            if self._workdir is not None:
                self._workdir.cleanup()
                self._workdir = None
        return [dict(m) for m in self._metrics]


def _metrics_callback(sink: list[dict[str, float]]):
    from transformers import TrainerCallback

    class _Capture(TrainerCallback):
        """Keeps the numeric entries of each training `log` call (not the final summary with `train_runtime`)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "train_runtime" not in logs:
                entry = {k: float(v) for k, v in logs.items() if isinstance(v, int | float)}
                entry["step"] = float(state.global_step)  # optimizer steps so far, as the reference logs it
                sink.append(entry)

    return _Capture()


def _logit_biases(spec, world) -> dict[int, float]:
    """Frozen LM-head biases of the toy policy and reference: EOS_LOGIT_BIAS on EOS, the spec's pad bias on pad."""
    biases = {world.stop_token_id: EOS_LOGIT_BIAS}
    if _spec_value(spec, "pad_logit_bias", 0.0):
        biases[world.pad_token_id] = float(spec.pad_logit_bias)
    return biases


def _add_logit_biases(model: torch.nn.Module, biases: dict[int, float]) -> None:
    head = model.get_output_embeddings()
    values = torch.zeros(head.out_features, device=head.weight.device, dtype=head.weight.dtype)
    for token, bias in biases.items():
        values[token] = bias
    head.bias = torch.nn.Parameter(values, requires_grad=False)


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
    generations (docs/trl-grpo.md).
    """
    grpo_trainer = _import_trl(module)
    import transformers
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from harness.targets.toy import toy_world

    stop = _spec_value(spec, "stop_token_id")
    world_spec = types.SimpleNamespace(
        seed=spec.seed,
        device=spec.device,
        dtype=spec.dtype,
        vocab_size=VOCAB_SIZE,
        prompt_length=PROMPT_LENGTH,
        num_prompts=_prompt_count(spec, generations_per_epoch),
        pad_logit_bias=0.0,  # set with the EOS bias below: the head has one bias vector
        dropout=_spec_value(spec, "dropout", 0.0),
    )
    transformers.set_seed(spec.seed)
    world = toy_world(world_spec)  # validates device and dtype
    if stop is not None and stop != world.stop_token_id:
        raise HarnessConfigError(
            f"trl-grpo target: TRL stops completions at the tokenizer's EOS ({world.stop_token_id}), not {stop}"
        )
    biases = _logit_biases(spec, world)
    for model in (world.policy, world.ref_policy):
        _add_logit_biases(model, biases)
    prompts = [" ".join(f"w{t}" for t in row) for row in world.prompts.tolist()]
    dataset = Dataset.from_dict({"prompt": prompts})

    workdir = tempfile.TemporaryDirectory(prefix="grpo-harness-trl-", ignore_cleanup_errors=True)
    with _quiet(), contextlib.redirect_stderr(io.StringIO()):  # progress bars of saving and loading weights
        if spec.beta != 0:
            # TRL rebuilds its reference model from the policy's `_name_or_path`: point it at the toy world's
            # independent reference (its EOS bias is added again below: from_pretrained drops it).
            reference_dir = os.path.join(workdir.name, "reference")
            world.ref_policy.save_pretrained(reference_dir)
            world.policy.config._name_or_path = reference_dir
        config = grpo_trainer.GRPOConfig(**_trl_args(spec, workdir.name, dict(extra or {})))
        rewards = RewardTap()
        trainer = grpo_trainer.GRPOTrainer(
            model=world.policy,
            reward_funcs=[rewards.wrap(f.__name__, f) for f in toy_rewards(spec)],
            args=config,
            train_dataset=dataset,
            processing_class=world.tokenizer,
        )
    if trainer.ref_model is not None:
        _add_logit_biases(trainer.accelerator.unwrap_model(trainer.ref_model), biases)
    for noisy in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(noisy)
    metrics: list[dict[str, float]] = []
    trainer.add_callback(_metrics_callback(metrics))

    loss_inputs: list[dict[str, Any]] = []
    rewards.rank = int(trainer.accelerator.process_index)
    _Recorder(trainer, loss_inputs, grpo_trainer, rewards).install()

    trainer.create_optimizer_and_scheduler(num_training_steps=spec.max_steps)
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    model = trainer.accelerator.unwrap_model(trainer.model)
    params = [p for p in model.parameters() if p.requires_grad]
    return TrlGRPORun(
        module=grpo_trainer,
        optimizer=optimizer,
        params=params,
        pad_token_id=world.pad_token_id,
        stop_token_id=world.stop_token_id,
        trainer=trainer,
        spec=spec,
        loss_inputs=loss_inputs,
        reward_calls=rewards.calls,
        _metrics=metrics,
        _workdir=workdir,
    )
