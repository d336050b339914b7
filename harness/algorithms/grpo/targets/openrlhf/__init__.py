"""The `openrlhf` target: OpenRLHF 0.11.2's own GRPO actor update on the toy world, on CPU (docs/openrlhf.md).

What runs is OpenRLHF's: its `ActorPPOTrainer` (openrlhf/trainer/ray/ppo_actor.py) with its `ppo_train` (the replay
buffer's micro-batches, shuffled, `iter_grad_accum_global_norm`'s per-window normalisers, the metrics pooled) and
`training_step` (`Actor.forward`, `PolicyLoss`, `compute_approx_kl`, `aggregate_loss`, `DeepspeedStrategy.backward`
and `optimizer_step`), on the DeepSpeed engine `DeepspeedStrategy.prepare` builds around an `Actor`; its old and
reference log-probs (`Actor.forward` without gradient, as `PolicyModelActor.forward` calls it); its advantages
(`RemoteExperienceMaker.compute_advantages_and_returns`: group_norm or dr_grpo, `compute_reward`,
`get_cumulative_returns`); its `NaiveReplayBuffer` and `Experience` batches. Each is called as `PPOTrainer`'s ray
controller has its workers call it for one training step. What is ours, each marked where it is: the CPU shims and
placeholder modules (platform.py); the spec -> arguments mapping (config.py); the rollout (OpenRLHF's is a vLLM
engine: here the policy samples on the CPU); the reward (the toy world's functions, weighted and summed into one
number per completion, 0 where none scored); the names its metrics are logged under (`NAMES`); the recorder
(recording.py). Ray is not started: the trainer's methods are called in this process, one rank.

OpenRLHF is imported when a run is built; without it, building a run is a HarnessConfigError of one line naming the
`openrlhf` extra and `nox -s openrlhf` (exit 2).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.errors import HarnessConfigError
from harness.instrument.reward_calls import RewardTap

from . import config

OPENRLHF = "0.11.2"
NAMES = {
    "entropy_loss": "entropy",
    "ppo_clip_ratio": "clip_ratio/region_mean",
    "response_length": "completions/mean_length",
    "truncated": "completions/clipped_ratio",
}
"""OpenRLHF's metric (as `ppo_train` returns it) -> the contract's name for what it is said to be; OpenRLHF's own names
are logged too. `policy_loss`, `kl` and `reward` are the contract's names already."""


def _import_openrlhf():
    """Import OpenRLHF's actor update, on the CPU (platform.on_cpu), or raise a HarnessConfigError of one line; nothing
    of the process is changed where openrlhf or deepspeed is not installed."""
    from .platform import on_cpu

    missing = [name for name in ("openrlhf", "deepspeed") if importlib.util.find_spec(name) is None]
    try:
        if missing:
            raise ImportError(f"no module named {missing[0]!r}")
        on_cpu()
        from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer  # noqa: F401
    except ImportError as why:
        raise HarnessConfigError(f"openrlhf target: openrlhf is not installed ({why}); `nox -s openrlhf` installs it "
                                 f"beside the 'ppo-stats-harness[openrlhf]' extra (openrlhf {OPENRLHF}, --no-deps)"
                                 ) from None  # fmt: skip


@dataclass
class OpenRLHFGRPORun:
    """One OpenRLHF GRPO run on the toy world, ready to `train()` once (the TargetRun protocol): `module` is
    OpenRLHF's loss module (openrlhf/models/loss.py), `optimizer` the torch optimizer DeepSpeed's engine steps,
    `params` the trainable parameters of the module it trains."""

    spec: Any
    trainer: Any
    reference: Any | None
    makers: Any
    module: Any
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    toy: Any
    """The toy world (harness.targets.toy): its prompts and token ids are the run's."""
    models: dict[str, torch.nn.Module]
    rewards: RewardTap
    funcs: list
    recorder: Any
    _trained: bool = False
    _generator: torch.Generator = field(default_factory=torch.Generator)

    prompts = property(lambda self: self.toy.prompts)
    pad_token_id = property(lambda self: self.toy.pad_token_id)
    stop_token_id = property(lambda self: self.toy.stop_token_id)
    loss_inputs = property(lambda self: self.recorder.records)
    reward_calls = property(lambda self: self.rewards.calls)

    def train(self) -> list[dict[str, float]]:
        """OpenRLHF's training steps until `max_steps` optimizer steps; one log per training step, as its controller
        logs `ppo_train`'s status (OpenRLHF's names, and the contract's where NAMES has one), `step` the optimizer
        steps so far."""
        from .platform import cuda_replaced

        if self._trained:
            raise RuntimeError("an OpenRLHFGRPORun trains once; build a new one")
        self._trained = True
        spec, logs = self.spec, []
        self._generator.manual_seed(spec.seed)
        per_step = spec.generation_batch // spec.num_generations
        quiet = (contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()))
        with self.recorder, cuda_replaced("cpu"), quiet[0], quiet[1]:
            for generation in range(spec.max_steps // config.steps_per_generation(spec)):
                at = generation * per_step % len(self.prompts)
                logs.append({**self._step(generation, self.prompts[at : at + per_step]),
                             "step": float(self.recorder.windows)})  # fmt: skip
        return logs

    def _step(self, generation: int, prompts: torch.Tensor) -> dict[str, float]:
        """One of OpenRLHF's training steps: the experience (ours: the rollout and the reward; OpenRLHF's: the
        log-probs, the advantages), the replay buffer, `ppo_train`."""
        from openrlhf.trainer.ppo_utils.experience import Experience

        from .recording import ROW

        actor = self.trainer.actor
        sequences, attention, action_mask, responses = self._rollout(prompts)  # ours: OpenRLHF's is a vLLM engine
        self.recorder.generation = generation
        self.recorder.generation_ids[generation] = responses.clone()
        scores = self._score(generation, responses, action_mask)  # ours: the toy world's reward
        lengths = action_mask.sum(-1)

        def logps(model):  # OpenRLHF: PolicyModelActor.forward / ReferenceModelActor.forward
            model.eval()
            with torch.no_grad():
                out = model(sequences, action_mask, attention, ring_attn_group=self.trainer.strategy.ring_attn_group)
            model.train()
            return out

        old = logps(actor)
        experience = Experience(
            sequences=sequences, attention_mask=attention, action_mask=action_mask, action_log_probs=old,
            base_action_log_probs=logps(self.reference) if self.reference is not None else None,
            kl=torch.zeros_like(old), rewards=scores, response_length=lengths.float(),
            truncated=~(responses == self.stop_token_id).any(-1), total_length=attention.sum(-1).float(),
            index=list(range(len(scores))), info={"reward": scores.clone(), ROW: torch.arange(len(scores))},
        )  # fmt: skip
        (experience,) = self.makers.compute_advantages_and_returns([experience])
        self.trainer.replay_buffer.append(experience)
        status = self.trainer.ppo_train(self.makers.kl_ctl.value)
        self.trainer.replay_buffer.clear()
        logged = {k: float(v) for k, v in status.items() if k != ROW and isinstance(v, int | float)}
        logged.update({name: logged[k] for k, name in NAMES.items() if k in logged})
        return logged

    def _rollout(self, prompts: torch.Tensor):
        """Ours: `num_generations` completions per prompt, sampled from the policy OpenRLHF trains (its engine's
        module, in eval mode, without gradient) at the spec's temperature, each ended by the stop token and padded
        after it; laid out as OpenRLHF's samples are (sequences, attention mask, action mask), with the responses."""
        spec, module = self.spec, self.trainer.actor.model.module
        rows = prompts.repeat_interleave(spec.num_generations, dim=0)
        ids, done = rows, torch.zeros(len(rows), dtype=torch.bool)
        masks = []
        module.eval()
        with torch.no_grad():
            for _ in range(spec.max_completion_length):
                logits = module(input_ids=ids, use_cache=False).logits[:, -1].float()
                token = torch.multinomial(torch.softmax(logits / spec.temperature, dim=-1), 1,
                                          generator=self._generator).squeeze(1)  # fmt: skip
                masks.append(~done)
                token = torch.where(done, torch.full_like(token, self.pad_token_id), token)
                ids = torch.cat([ids, token[:, None]], dim=1)
                done |= token == self.stop_token_id
        module.train()
        action_mask = torch.stack(masks, dim=1)
        attention = torch.cat([torch.ones_like(rows, dtype=torch.bool), action_mask], dim=1).long()
        return ids, attention, action_mask, ids[:, rows.shape[1] :]

    def _score(self, generation: int, responses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Ours: each reward function on the completions' ids up to and including the stop token; a completion's
        reward is the weighted sum over the functions that scored it (0 where none did): one number per completion,
        as OpenRLHF's reward is."""
        self.rewards.generation = generation
        completions = [row[m].tolist() for row, m in zip(responses, mask)]
        weights = self.spec.reward_weights or (1.0,) * len(self.funcs)
        columns = [func(completion_ids=completions, eos_token_id=self.stop_token_id) for func in self.funcs]
        return torch.tensor([sum(w * s for w, s in zip(weights, scores) if s is not None) for scores in zip(*columns)],
                            dtype=torch.float32)  # fmt: skip


def build(spec) -> OpenRLHFGRPORun:
    """OpenRLHF's actor trainer (and a reference `Actor` when beta != 0) for `spec` on the toy world."""
    _import_openrlhf()
    config.checked(spec)
    from harness.targets.toy import toy_world

    from ..trl import world
    from .platform import cuda_replaced
    from .recording import OpenRLHFRecorder

    for name in ("DeepSpeed", "deepspeed"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from openrlhf.models import Actor
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
    from openrlhf.utils.deepspeed import DeepspeedStrategy

    torch.manual_seed(spec.seed)
    toy = toy_world(types.SimpleNamespace(**{**vars(world.world_spec(spec, 1)), "num_prompts": _prompts(spec)}))
    biases = world.logit_biases(spec, toy)
    for model in (toy.policy, toy.ref_policy):
        world.add_logit_biases(model, biases)
    args = config.arguments(spec)
    strategy = DeepspeedStrategy(seed=spec.seed, max_norm=args.actor.max_norm, zero_stage=args.ds.zero_stage,
                                 micro_train_batch_size=args.train.micro_batch_size,
                                 train_batch_size=args.train.batch_size, args=args)  # fmt: skip
    with cuda_replaced(0), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        strategy.setup_distributed()  # OpenRLHF: PolicyModelActor.init_model_from_pretrained, in its order
        actor = Actor(toy.policy, temperature=spec.temperature)
        actor.packing_samples = args.ds.packing_samples  # Actor sets it only for a model it loads by path
        adam = vars(args.actor.adam)
        actor, optimizer, scheduler = strategy.prepare((actor, dict(
            optim=args.actor.optim, adam=adam, muon={}, lr_scheduler=args.actor.lr_scheduler,
            lr_warmup_ratio=args.actor.lr_warmup_ratio, min_lr_ratio=args.actor.min_lr_ratio,
            max_norm=args.actor.max_norm, scheduler_steps=spec.max_steps)))  # fmt: skip
        trainer = ActorPPOTrainer(strategy, actor, ema_model=None, actor_optim=optimizer, actor_scheduler=scheduler,
                                  micro_train_batch_size=args.train.micro_batch_size, dataloader_pin_memory=False)
    reference = None
    if spec.beta != 0:
        reference = Actor(toy.ref_policy, temperature=spec.temperature)
        reference.packing_samples = False
    makers = RemoteExperienceMaker(None, None, None, None, kl_controller=FixedKLController(args.algo.kl.init_coef),
                                   strategy=strategy, tokenizer=None)  # fmt: skip
    rewards = RewardTap()
    funcs = [rewards.wrap(f.__name__, f, world.completions_given) for f in world.toy_rewards(spec)]
    models = {"policy": toy.policy, **({"ref_policy": toy.ref_policy} if spec.beta != 0 else {})}
    from openrlhf.models import loss

    params = [p for p in actor.model.module.parameters() if p.requires_grad]
    recorder = OpenRLHFRecorder(trainer, actor.model.optimizer, spec.max_completion_length, toy.pad_token_id)
    return OpenRLHFGRPORun(spec, trainer, reference, makers, loss, actor.model.optimizer, params, toy, models, rewards,
                           funcs, recorder)  # fmt: skip


def _prompts(spec) -> int:
    """Prompts the run trains on: one training step's, for each training step."""
    return spec.generation_batch // spec.num_generations * (spec.max_steps // max(config.steps_per_generation(spec), 1))


build.algorithm = "grpo"
build.definitions = {
    "profile": "trl",  # the contract, where OpenRLHF 0.11.2 defines an entry as TRL does; each entry below is its own
    "advantage_epsilon": 1e-9,  # experience_maker.py, compute_advantages_and_returns: group_norm's std + 1e-9
    "partial_last_interval": "logged",  # ppo_trainer.py, save_logs_and_checkpoints: every training step's status
    "kl_clamp": 10.0,  # models/utils.py, compute_approx_kl: value.clamp(min=-10, max=10)
    "kl_importance_weighting": "never",  # compute_approx_kl: no ratio without --algo.kl.unbiased_gradient
    "token_mean_scope": "window",  # loss_utils.py, iter_grad_accum_global_norm: the window's tokens
    "policy_loss_includes_kl": False,  # ppo_actor.py, training_step: policy_loss is PolicyLoss's, kl logged apart
    # ppo_trainer.py, save_logs_and_checkpoints: logs when global_step, its training steps (rollout batches), is a
    # multiple of --logger.logging_steps (default 1): one log per generation, whatever its optimizer steps
    "logging_cadence": "generation",
}
"""OpenRLHF 0.11.2's definitions (docs/openrlhf.md, "Its declared profile"); the rest are the contract's."""
build.optional_metrics = ("policy_loss",)
build.optimizer = "AdamW"  # DeepSpeed's FusedAdam, built from OpenRLHF's "AdamW" config (adam_w_mode: decoupled decay)
build.unlogged_metrics = (
    # one clip fraction over both sides, ppo_clip_ratio (models/loss.py, PolicyLoss.forward): no low or high mean
    "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/low_min", "clip_ratio/high_max",
    # the reward's mean and group_reward_std, the mean over completions of their group's std (experience_maker.py,
    # compute_advantages_and_returns): no std over the batch, no zero-std share, nothing per reward function
    "reward_std", "frac_reward_zero_std", "rewards/*/mean", "rewards/*/std",
    # one length statistic, the mean of response_length (ppo_train's sample-weighted mean): no min, max or terminated
    "completions/min_length", "completions/max_length", "completions/mean_terminated_length",
    "completions/min_terminated_length", "completions/max_terminated_length",
)  # fmt: skip
build.not_applicable = {
    **{f"loss_type={t}": config.NO_LOSS.format(repr(t))
       for t in ("bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo")},
    "scale_rewards=batch": config.BATCH_STD,
    "run=delta": config.DELTA,
    **{f"logp_gradient[run={r}]": "its run is dr_grpo's: " + config.NO_LOSS.format("'dr_grpo'")
       for r in ("kl_uncorrected", "short_completions")},
    "reward_model": config.REWARD_MODEL,
    "short_window": config.WHOLE_WINDOWS,
    "run=short_window": config.WHOLE_WINDOWS,  # logp_gradient's windows 3+1, under every loss type
    "every_microbatch_applied*": config.WHOLE_WINDOWS,
    "freshness": f"{config.TO_THE_END} (3 optimizer steps of 2 per training step)",
    "schedule": f"{config.TO_THE_END} (7 optimizer steps of 2 per training step)",
    "run=sequence_level": config.SEQUENCE_LEVEL,
    "mask_truncated_completions=True": config.TRUNCATED,
    "run=top_entropy": config.ENTROPY_MASK,
    "run=off_policy_mask": config.OFF_POLICY_MASK,
    "entropy_gradient*": "the target leaves --actor.entropy_coef unset and keeps no gradient at the entropies",
    "multi_objective_aggregation=normalize_then_sum": config.AGGREGATION,
    "prompt_pads=3": "the target builds its toy world's prompts unpadded (it does not read prompt_pads): every "
    "prompt it hands OpenRLHF has prompt_length real tokens",
    "reward_order=reversed": "the target weighs and sums its reward functions itself (_score) and hands OpenRLHF one "
    "reward per completion: the order of the functions is the target's, not the trainer's to pair with weights",
    "lr_schedule*": config.SCHEDULE,  # verify-dist's lr_schedule[ranks=2] too
    "run=across_generations": config.ACROSS,
}  # fmt: skip
"""The checks OpenRLHF cannot run, each with the reason (config.refusal raises for their specs)."""
