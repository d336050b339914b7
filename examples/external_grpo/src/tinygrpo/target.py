"""tinygrpo held to ppo-stats-harness: `ppo-verify --target tinygrpo.target:factory`.

`factory(spec)` builds a `TinyGRPO` for one scenario of the GRPO gate: the spec's geometry and
hyper-parameters (a `GRPOSpec`, which carries TRL's `GRPOConfig` names) mapped onto `Settings`,
the tiny offline models of the harness's toy world, and one or two reward functions. While it
trains, the harness's `LossRecorder` keeps one record per pass of the loss (`TinyGRPO.pass_loss`):
what the loss was fed, the log-probs and entropies tinygrpo's own `token_logprobs` and
`token_entropy` returned in it (and their gaps to float64 recomputations), and the gradient the
backward pass brought to the log-probs. `RewardTap` keeps every score the reward functions gave.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.algorithms.grpo.spec import GRPOSpec
from harness.errors import HarnessConfigError
from harness.instrument.loss import LossRecord
from harness.instrument.loss_recorder import LossRecorder
from harness.instrument.reward_calls import RewardTap
from tinygrpo import trainer

SEVEN = 7
"""The token the rewards count."""


def sevens(prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """How often token 7 appears in each completion (scores every completion)."""
    return (completions == SEVEN).sum(dim=1).to(torch.float32)


def partial_rewards(stop_id: int) -> dict[str, trainer.RewardFn]:
    """Two reward functions that each cannot score some completions, and together cannot score some: by the first
    token t of a completion, neither scores t % 4 == 0 (the pad 0 included), `stops` not t % 4 == 1 either."""

    def sevens_partial(prompts: torch.Tensor, completions: torch.Tensor) -> list[float | None]:
        first = completions[:, 0].tolist()
        counts = sevens(prompts, completions).tolist()
        return [None if t % 4 == 0 else c for t, c in zip(first, counts)]  # None: cannot score

    def stops(prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
        stopped = (completions == stop_id).any(dim=1).to(torch.float32)
        return stopped.masked_fill(completions[:, 0] % 4 <= 1, float("nan"))  # NaN: cannot score

    return {"sevens": sevens_partial, "stops": stops}


def model_reward(model: torch.nn.Module, pad_id: int) -> trainer.RewardFn:
    """A reward function made of a sequence-classification model (tinygrpo takes callables only): the model's
    scalar head at the last real token of each prompt and completion."""

    @torch.no_grad()
    def reward_model(prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
        inputs = trainer.model_inputs(torch.cat([prompts, completions], dim=1), pad_id)
        hidden = getattr(model, model.base_model_prefix)(**inputs).last_hidden_state
        head = model.score(hidden).squeeze(-1)
        positions = torch.arange(head.shape[1], device=head.device)
        last = (inputs["attention_mask"] * positions).argmax(dim=1)
        return head[torch.arange(len(head), device=head.device), last].float()

    return reward_model


def handed_rewards(spec: GRPOSpec, world: Any, tap: RewardTap) -> dict[str, trainer.RewardFn]:
    """The reward functions for the spec, each wrapped by the tap in the order of the weights; with
    `spec.reward_model` the second is the toy world's reward model, which the tap watches instead (it keeps the
    head's output at every position, and the gate reads the score there itself)."""
    given = {"inputs": lambda args, kwargs: args[1]}  # the completions each call is given, its second argument
    if spec.reward_model:
        first = tap.wrap("sevens", sevens, **given)  # wrapped, then watched: the tap numbers them in that order
        watched = tap.watch("reward_model", world.reward_model, world.pad_token_id)
        return {"sevens": first, "reward_model": model_reward(watched, world.pad_token_id)}
    funcs = {"sevens": sevens} if len(spec.reward_weights or (1.0,)) == 1 else partial_rewards(world.stop_token_id)
    order = list(funcs.items())[:: -1 if spec.reward_order == "reversed" else 1]  # the weights' order: handed_weights
    return {name: tap.wrap(name, fn, **given) for name, fn in order}


def settings_for(spec: GRPOSpec) -> trainer.Settings:
    """The gate's scenario in tinygrpo's words."""
    try:
        return trainer.Settings(
            rows_per_pass=spec.per_device_train_batch_size,
            passes_per_step=spec.gradient_accumulation_steps,
            passes_per_generation=spec.steps_per_generation,
            group_size=spec.num_generations,
            reuse=spec.num_iterations,
            steps=spec.max_steps,
            log_every=spec.logging_steps,
            lr=spec.learning_rate,
            new_tokens=spec.max_completion_length,
            temperature=spec.temperature,
            loss_type=spec.loss_type,
            kl_weight=spec.beta,
            kl_times_ratio=spec.use_bias_correction_kl,
            clip_low=spec.epsilon_low,
            clip_high=spec.epsilon_high,
            ratio_cap=spec.delta,
            sapo_tau=(spec.sapo_temperature_pos, spec.sapo_temperature_neg),
            vespo_pos=(spec.vespo_k_pos, spec.vespo_lambda_pos),
            vespo_neg=(spec.vespo_k_neg, spec.vespo_lambda_neg),
            scale_rewards=spec.scale_rewards,
            reward_weights=spec.handed_weights,  # in the order handed_rewards hands the functions over
            grad_clip=spec.max_grad_norm,
            # the contract's mask keeps a sampled pad: a pad bias empties completions only this way; and
            # mask_truncated_completions (TRL's option) is tinygrpo's drop_truncated
            drop_truncated=spec.pad_logit_bias != 0 or spec.mask_truncated_completions,
            seed=spec.seed,
        )
    except ValueError as exc:  # a usage error of the gate (exit 2), not a failed check
        raise HarnessConfigError(f"tinygrpo: {exc}") from None


@dataclass
class TinyGRPORun:
    """One TinyGRPO run as the GRPO gate sees it (TargetRun, with `loss_inputs` and `reward_calls`)."""

    grpo: trainer.TinyGRPO
    pad_token_id: int
    stop_token_id: int
    rewards: RewardTap
    module: types.ModuleType = trainer
    recorder: LossRecorder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        logits = ((trainer, "token_logprobs", "log_softmax"), (trainer, "token_entropy", "entropy"))
        self.recorder = LossRecorder(self.grpo, "pass_loss", trainer, self._fields, logits=logits)
        self.recorder.around(self.grpo, "generate", self._scoring)

    def _scoring(self, generate):
        """`generate`, telling the reward tap which generation its functions score."""

        def scored_generate():
            self.rewards.generation = self.grpo.generations
            return generate()

        return scored_generate

    def _fields(self, batch: trainer.Generation, rows: torch.Tensor, normaliser: float) -> dict[str, Any]:
        """What a pass's arguments say of its loss record (the recorder copies the tensors)."""
        return {
            "generation": batch.index,
            "window": self.grpo.step,  # the optimizer step this pass belongs to
            "rank": 0,
            "completion_mask": batch.mask[rows],
            "completions": rows,
            "completion_ids": batch.ids[rows],
            "old_logps": None if batch.old is None else batch.old[rows],
            "ref_logps": None if batch.ref is None else batch.ref[rows],
            "advantages": batch.advantages[rows],
        }

    @property
    def loss_inputs(self) -> tuple[LossRecord, ...]:
        return self.recorder.records

    @property
    def reward_calls(self) -> list:
        return self.rewards.calls

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.grpo.opt

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return self.grpo.params

    @property
    def models(self) -> dict[str, torch.nn.Module]:
        """The networks handed to the trainer (the gate copies them before training)."""
        models = {"policy": self.grpo.policy}
        if self.grpo.ref_policy is not None:
            models["ref_policy"] = self.grpo.ref_policy
        return models

    @property
    def prompts(self) -> torch.Tensor:
        """The (N, P) prompt ids tinygrpo draws its queries from."""
        return self.grpo.prompts

    def train(self) -> list[dict[str, float]]:
        with self.recorder:
            return self.grpo.train()


def build(spec: GRPOSpec, trainer_class: type[trainer.TinyGRPO] = trainer.TinyGRPO) -> TinyGRPORun:
    """A run of `trainer_class` for `spec` on the toy world of its seed."""
    from harness.targets.toy import toy_world

    # seed, sizes, device, dtype, pad_logit_bias, dropout and the prompts' left padding of the spec
    world = toy_world(spec, prompt_pads=spec.prompt_pads)
    settings = settings_for(spec)
    tap = RewardTap()
    grpo = trainer_class(
        settings,
        world.policy,
        world.ref_policy if spec.beta != 0 else None,
        handed_rewards(spec, world, tap),
        world.prompts,
        pad_id=world.pad_token_id,
        stop_id=world.stop_token_id,
    )
    return TinyGRPORun(grpo, world.pad_token_id, world.stop_token_id, tap)


def factory(spec: GRPOSpec) -> TinyGRPORun:
    """The gate's entry point: `--target tinygrpo.target:factory`."""
    return build(spec)


factory.algorithm = "grpo"  # the gate whose checks it runs: the harness never guesses it
factory.not_applicable = {"run=sequence_level": "tinygrpo has token-level importance ratios only",
                          "importance_sampling_level=sequence": "tinygrpo has token-level importance ratios only",
                          "run=top_entropy": "tinygrpo keeps every token's policy term: it has no entropy mask",
                          "run=off_policy_mask": "tinygrpo keeps every completion's policy term: it has no "
                          "off-policy sequence mask",
                          "entropy_gradient*": "tinygrpo's loss has no entropy bonus",
                          "multi_objective_aggregation=normalize_then_sum": "tinygrpo normalises the weighted sum "
                          "of its rewards: it has no per-function normalisation",
                          "lr_schedule*": "tinygrpo trains at a constant learning rate without weight decay",
                          "run=across_generations": "a tinygrpo window never holds passes of two generations"}
factory.contract_version = 2  # written for GRPO contract 2 (`python -m harness --version`): a later change is named
