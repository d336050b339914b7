"""The `verl` target: verl 0.9.1's own GRPO update on the toy world, on CPU (docs/verl.md).

What runs is verl's: its `TrainingWorker` (verl.workers.engine_workers) on its FSDP2 engine
(`FSDPEngineWithLMHead`), with its loss (`verl.workers.utils.losses.ppo_loss`: `compute_policy_loss_vanilla`,
`agg_loss`, `kl_penalty`), its old and reference log-probs (`infer_batch`), its GRPO advantages
(`compute_grpo_outcome_advantage`), its batch conversion (`left_right_2_no_padding`, `no_padding_2_padding`) and its
metrics (`reduce_metrics`, `compute_data_metrics`), each called as `RayPPOTrainer.fit` calls it for one training
step. What is ours, each marked where it is: the CPU platform (platform.py); the spec -> config mapping (config.py);
the rollout (verl's is a vLLM or SGLang server: here the policy samples on the CPU); the reward function (the toy
world's, the weighted sum of the functions that scored, 0 where none did, as a verl `compute_score` returns one
number); the names its metrics are logged under (`NAMES`); and the recorder (recording.py). The ray controller
is not started: the worker's methods are called in this process, one rank.

verl is imported when a run is built; without it, that is a HarnessConfigError naming the `verl` extra (exit 2).
"""

from __future__ import annotations

import contextlib
import functools
import io
import tempfile
import types
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from harness.errors import HarnessConfigError
from harness.instrument.reward_calls import RewardTap

from . import config

NAMES = {
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/pg_clipfrac": "clip_ratio/region_mean",
    "actor/pg_loss": "policy_loss",
    "actor/grad_norm": "grad_norm",
    "critic/score/mean": "reward",
    "response_length/mean": "completions/mean_length",
    "response_length/max": "completions/max_length",
    "response_length/min": "completions/min_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
}
"""verl's metric (as its trainer logs it) -> the contract's name for what it is said to be; verl's own names are
logged too."""
VERL = "0.9.1"


def names(loss_type: str) -> dict[str, str]:
    """NAMES for `loss_type`: verl's clip fraction is cispo's clip ratio under cispo, and no metric under sapo
    (verl logs 0 there; the contract's sapo logs no clip ratio)."""
    if loss_type == "cispo":
        return {**{k: v for k, v in NAMES.items() if k != "actor/pg_clipfrac"}, "actor/pg_clipfrac": "cispo_clip_ratio"}
    if loss_type == "sapo":
        return {k: v for k, v in NAMES.items() if k != "actor/pg_clipfrac"}
    return dict(NAMES)


def _import_verl():
    from .platform import without_unusable_kernels

    without_unusable_kernels()
    try:
        import verl
    except ImportError as why:
        raise HarnessConfigError(f"verl target: verl is not installed ({why}); pip install "
                                 f"'ppo-stats-harness[verl]' (verl {VERL})") from None  # fmt: skip
    return verl


@dataclass
class VerlGRPORun:
    """One verl GRPO run on the toy world, ready to `train()` once (the TargetRun protocol)."""

    spec: Any
    worker: Any
    ref: Any | None
    actor_config: Any
    prompts: torch.Tensor
    pad_token_id: int
    stop_token_id: int
    models: dict[str, torch.nn.Module]
    rewards: RewardTap
    funcs: list
    recorder: Any
    workdir: Any
    _trained: bool = False
    _generator: torch.Generator = field(default_factory=torch.Generator)

    @property
    def module(self):
        """verl's loss module (verl.workers.utils.losses), where the functions of its loss are looked up."""
        from verl.workers.utils import losses

        return losses

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.worker.engine.optimizer

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.worker.engine.module.parameters() if p.requires_grad]

    @property
    def loss_inputs(self):
        return self.recorder.records

    @property
    def reward_calls(self):
        return self.rewards.calls

    def train(self) -> list[dict[str, float]]:
        """verl's training steps until `max_steps` optimizer steps; one log per training step, as verl's trainer
        logs (verl's names, and the contract's where NAMES has one), `step` the optimizer steps so far."""
        if self._trained:
            raise RuntimeError("a VerlGRPORun trains once; build a new one")
        self._trained = True
        self._generator.manual_seed(self.spec.seed)
        logs = []
        prompts_per_step = self.spec.generation_batch // self.spec.num_generations
        try:
            with self.recorder, contextlib.redirect_stdout(io.StringIO()):
                for generation in range(self.spec.max_steps // config.steps_per_generation(self.spec)):
                    first = generation * prompts_per_step % len(self.prompts)
                    prompts = self.prompts[first : first + prompts_per_step]
                    metrics = self._step(generation, prompts)
                    metrics["step"] = float(self.recorder.windows)
                    logs.append(metrics)
        finally:
            self.workdir.cleanup()
        return logs

    def _step(self, generation: int, prompts: torch.Tensor) -> dict[str, float]:
        """One of verl's training steps, as RayPPOTrainer.fit makes it (its functions, in its order)."""
        from verl.trainer.ppo.core_algos import agg_loss, compute_grpo_outcome_advantage
        from verl.trainer.ppo.metric_utils import compute_data_metrics
        from verl.utils import tensordict_utils as tu
        from verl.utils.metric import reduce_metrics
        from verl.utils.py_functional import rename_dict
        from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

        spec, actor = self.spec, self.actor_config
        batch = self._rollout(generation, prompts)  # ours: verl's rollout is an inference server
        self.recorder.generation = generation
        self.recorder.generation_ids[generation] = batch.batch["responses"].clone()
        scores = self._score(generation, batch)  # ours: the toy world's reward, one number per completion
        length = batch.batch["response_mask"].sum(-1)
        token_scores = torch.zeros_like(batch.batch["response_mask"], dtype=torch.float32)
        token_scores[torch.arange(len(scores)), (length - 1).clamp(min=0)] = scores  # verl's reward manager's place
        batch.batch["token_level_scores"] = token_scores
        metrics: dict[str, float] = {}

        def infer(worker, entropy: bool):  # verl: RayPPOTrainer._compute_old_log_prob / _compute_ref_log_prob
            td = left_right_2_no_padding(batch.to_tensordict())
            tu.assign_non_tensor(td, calculate_entropy=entropy, compute_loss=False)
            out = worker.infer_batch(td)
            return (no_padding_2_padding(tu.get(out, "log_probs"), td).float(),
                    no_padding_2_padding(tu.get(out, "entropy"), td).float() if entropy else None)  # fmt: skip

        old, entropies = infer(self.worker, True)
        self.recorder.old_pass(generation, entropies)  # ours: what actor/entropy aggregates, for the oracle
        metrics["actor/entropy"] = agg_loss(loss_mat=entropies, loss_mask=batch.batch["response_mask"],
                                            loss_agg_mode=actor.loss_agg_mode,
                                            loss_scale_factor=actor.loss_scale_factor).item()  # fmt: skip
        batch.batch["old_log_probs"] = old
        if self.ref is not None:
            batch.batch["ref_log_prob"] = infer(self.ref, False)[0]
        batch.batch["token_level_rewards"] = token_scores
        advantages, returns = compute_grpo_outcome_advantage(
            token_level_rewards=token_scores,
            response_mask=batch.batch["response_mask"],
            index=batch.non_tensor_batch["uid"],
            norm_adv_by_std_in_grpo=config.SCALE_REWARDS[spec.scale_rewards],
        )
        batch.batch["advantages"], batch.batch["returns"] = advantages, returns
        # verl: RayPPOTrainer._update_actor
        td = left_right_2_no_padding(batch.to_tensordict())
        mini = actor.ppo_mini_batch_size
        tu.assign_non_tensor(td, calculate_entropy=actor.calculate_entropy or actor.entropy_coeff != 0.0,
                             distillation_use_topk=False, distillation_only=False, global_batch_size=mini,
                             mini_batch_size=mini, epochs=actor.ppo_epochs, seed=actor.data_loader_seed,
                             dataloader_kwargs={"shuffle": actor.shuffle}, compute_loss=True)  # fmt: skip
        out = tu.get(self.worker.train_mini_batch(td), "metrics")
        out = rename_dict(out, "actor/")
        out["perf/mfu/actor"] = out.pop("actor/mfu")
        metrics.update(reduce_metrics(out))
        metrics.update(compute_data_metrics(batch=batch, use_critic=False))
        logged = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) or torch.is_tensor(v)
                  or hasattr(v, "item")}  # fmt: skip
        logged.update({name: logged[k] for k, name in names(spec.loss_type).items() if k in logged})
        return logged

    def _rollout(self, generation: int, prompts: torch.Tensor):
        """Ours: `num_generations` completions per prompt, sampled from the policy verl trains (its engine's
        module, in eval mode, without gradient) at the spec's temperature, each ended by the stop token and padded
        after it; laid out as verl's rollout returns them (`prompts`, `responses`, `input_ids`, `attention_mask`,
        `position_ids`, `response_mask`, a `uid` per prompt), with each row's place (recording.ROW)."""
        from verl import DataProto
        from verl.utils.torch_functional import get_response_mask

        spec, module = self.spec, self.worker.engine.module
        rows = prompts.repeat_interleave(spec.num_generations, dim=0)
        ids, done = rows, torch.zeros(len(rows), dtype=torch.bool)
        was_training = module.training
        module.eval()
        with torch.no_grad():
            for _ in range(spec.max_completion_length):
                logits = module(input_ids=ids, use_cache=False).logits[:, -1].float()
                probs = torch.softmax(logits / spec.temperature, dim=-1)
                token = torch.multinomial(probs, 1, generator=self._generator).squeeze(1)
                token = torch.where(done, torch.full_like(token, self.pad_token_id), token)
                ids = torch.cat([ids, token[:, None]], dim=1)
                done |= token == self.stop_token_id
        module.train(was_training)
        responses = ids[:, rows.shape[1] :]
        response_mask = get_response_mask(response_id=responses, eos_token=self.stop_token_id)  # verl's
        attention = torch.cat([torch.ones_like(rows), response_mask], dim=1)
        uids = [str(uuid.UUID(int=generation * 100003 + i)) for i in range(len(prompts))]
        return DataProto.from_single_dict(
            {"prompts": rows, "responses": responses, "input_ids": ids, "attention_mask": attention,
             "position_ids": (torch.cumsum(attention, dim=1) - 1).clamp(min=0), "response_mask": response_mask,
             "harness_row": torch.arange(len(rows)),
             "uid": np.array([u for u in uids for _ in range(spec.num_generations)], dtype=object)},
            meta_info={"temperature": spec.temperature},  # verl's rollout hands its sampling temperature on
        )  # fmt: skip

    def _score(self, generation: int, batch) -> torch.Tensor:
        """Ours: each reward function on the completions' ids up to and including the stop token (the valid response
        ids verl's reward manager scores), weighted and summed over the
        functions that scored (0 where none did)."""
        mask = batch.batch["response_mask"].bool()
        completions = [row[m].tolist() for row, m in zip(batch.batch["responses"], mask)]
        self.rewards.generation = generation
        weights = self.spec.reward_weights or (1.0,) * len(self.funcs)
        total = torch.zeros(len(completions))
        for weight, func in zip(weights, self.funcs):
            scores = func(completion_ids=completions, eos_token_id=self.stop_token_id)
            total += torch.tensor([0.0 if s is None else weight * s for s in scores])
        return total


def build(spec) -> VerlGRPORun:
    """verl's worker (and its reference worker when beta != 0) for `spec` on the toy world."""
    _import_verl()
    config.checked(spec)
    from harness.targets.toy import toy_world

    from ..trl import world
    from .platform import on_cpu
    from .recording import VerlRecorder

    on_cpu()
    torch.manual_seed(spec.seed)
    toy = toy_world(types.SimpleNamespace(**{**vars(world.world_spec(spec, 1)), "num_prompts": _prompts(spec)}))
    biases = world.logit_biases(spec, toy)
    workdir = tempfile.TemporaryDirectory(prefix="grpo-harness-verl-", ignore_cleanup_errors=True)
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig
    from verl.workers.utils.losses import ppo_loss

    def worker(model, name: str, trains: bool):
        path = f"{workdir.name}/{name}"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            model.save_pretrained(path)
            toy.tokenizer.save_pretrained(path)
            actor = config.actor_config(spec, path)
            made = TrainingWorker(TrainingWorkerConfig(
                model_type="language_model", model_config=actor.model_config, engine_config=actor.engine,
                optimizer_config=actor.optim, checkpoint_config=actor.checkpoint))  # fmt: skip
            made.reset()
        if trains:
            made.set_loss_fn(functools.partial(ppo_loss, config=actor))  # verl: ActorRolloutRefWorker.init_model
        _bias(made.engine.module, biases)  # ours: the toy world's frozen EOS bias (module docstring of ..trl.world)
        return made, actor

    actor_worker, actor = worker(toy.policy, "policy", True)
    ref_worker = worker(toy.ref_policy, "reference", False)[0] if spec.beta != 0 else None
    for model in (toy.policy, toy.ref_policy):
        world.add_logit_biases(model, biases)
    rewards = RewardTap()
    funcs = [rewards.wrap(f.__name__, f, world.completions_given) for f in world.toy_rewards(spec)]
    models = {"policy": toy.policy, **({"ref_policy": toy.ref_policy} if spec.beta != 0 else {})}
    return VerlGRPORun(spec, actor_worker, ref_worker, actor, toy.prompts, toy.pad_token_id, toy.stop_token_id, models,
                       rewards, funcs, VerlRecorder(actor_worker), workdir)  # fmt: skip


def _prompts(spec) -> int:
    """Prompts the run trains on: one training step's, for each training step."""
    return spec.generation_batch // spec.num_generations * (spec.max_steps // max(config.steps_per_generation(spec), 1))


def _bias(module: torch.nn.Module, biases: dict[int, float]) -> None:
    """Ours: add the toy world's logit biases to the output of `module`'s LM head (verl builds its model from saved
    weights, and a Llama head has no bias of its own to save them in)."""
    head = module.get_output_embeddings()
    values = torch.zeros(head.out_features)
    for token, bias in biases.items():
        values[token] = bias
    head.register_forward_hook(lambda _module, _inputs, output: output + values.to(output.dtype))


WHOLE_MINI_BATCHES = ("verl cuts a training step's batch into whole mini-batches (TrainingWorker.train_mini_batch: "
                      "tensordict_utils.make_iterator asserts the batch is a multiple of the mini-batch), so no window "
                      "of a generation is short (3+1)")
TO_THE_END = "verl trains every generation to its end: a run cannot stop after part of a training step's mini-batches"
NOT_APPLICABLE = {
    "loss_type=bnpo": "verl 0.9.1 has no per-micro-batch token mean: its token-mean divides by the mini-batch's tokens "
    "(core_algos.agg_loss)",
    "loss_type=luspo": "verl 0.9.1 has no luspo policy loss (core_algos.POLICY_LOSS_REGISTRY)",
    "loss_type=vespo": "verl 0.9.1 has no vespo policy loss (core_algos.POLICY_LOSS_REGISTRY)",
    "scale_rewards=batch": "verl's GRPO advantage divides by its group's std or by nothing "
    "(compute_grpo_outcome_advantage, norm_adv_by_std_in_grpo), never by a batch-wide std",
    "run=delta": "verl's vanilla policy loss has no upper bound delta on the ratio",
    "reward_model": "verl scores with a reward-model worker of its own, which this target does not build",
    "short_window": WHOLE_MINI_BATCHES,
    "run=short_window": WHOLE_MINI_BATCHES,  # logp_gradient's windows 3+1, under every loss type
    "every_microbatch_applied*": WHOLE_MINI_BATCHES,
    "freshness": f"{TO_THE_END} (3 optimizer steps of 2 per training step)",
    "schedule": f"{TO_THE_END} (7 optimizer steps of 2 per training step)",
    "run=sequence_level": config.SEQUENCE_LEVEL,
    "mask_truncated_completions=True": config.TRUNCATED,
    "run=top_entropy": config.ENTROPY_MASK,
    "run=off_policy_mask": config.OFF_POLICY_MASK,
    "entropy_gradient*": "the target sets entropy_coeff 0 and its recorder keeps no gradient at the entropies",
    "multi_objective_aggregation=normalize_then_sum": config.AGGREGATION,
    "prompt_pads=3": config.PROMPTS,
    "reward_order=reversed": config.REWARD_ORDER,
    "lr_schedule*": config.SCHEDULE,  # verify-dist's lr_schedule[ranks=2] too
    "run=across_generations": config.ACROSS,
}
"""The checks verl cannot run, each with the reason (config.refusal raises for their specs)."""

build.algorithm = "grpo"
build.definitions = "verl"
build.optional_metrics = ("policy_loss",)
build.unlogged_metrics = (
    # verl 0.9.1 logs one clip fraction over both sides, actor/pg_clipfrac, and the dual-clip one, pg_clipfrac_lower
    # (core_algos.compute_policy_loss_vanilla): no low or high mean, no extreme over completions
    "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/low_min", "clip_ratio/high_max",
    # the score's mean, max and min (metric_utils.compute_data_metrics: critic/score/*), one number per completion
    "reward_std", "frac_reward_zero_std", "rewards/*/mean", "rewards/*/std",
    # every completion's lengths, none over the terminated ones alone (compute_data_metrics: response_length/*)
    "completions/mean_terminated_length", "completions/min_terminated_length", "completions/max_terminated_length",
)  # fmt: skip
build.not_applicable = NOT_APPLICABLE
