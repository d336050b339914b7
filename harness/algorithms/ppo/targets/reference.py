"""The default target: this project's reference trainer on the toy world."""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch

from harness.algorithms.ppo.spec import ScenarioSpec
from harness.errors import HarnessConfigError
from harness.targets.logged import LogTap


def scenario_reward(target_token: int = 7, length_penalty: float = 0.05):
    """A deterministic reward on the truncated responses that records every score it gives."""
    given: list[torch.Tensor] = []

    def reward(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        hits = (responses == target_token).sum(dim=1).double()
        score = hits - length_penalty * (responses != 0).sum(dim=1).double()
        given.append(score.detach().cpu())
        return score.float()

    reward.given = given
    return reward


def text_reward(target_word: str = "w7", length_penalty: float = 0.05, echo_bonus: float = 0.5):
    """A deterministic reward on decoded text that records the strings it was given and every score it gives.

    score = occurrences of `target_word` in the response - `length_penalty` per response word, plus
    `echo_bonus` when the response begins with the prompt's last word (so the score reads the prompt too).
    """
    given: list[torch.Tensor] = []
    seen: list[tuple[list[str], list[str]]] = []

    def score_texts(prompts: list[str], texts: list[str]) -> list[float]:
        scores = []
        for prompt, text in zip(prompts, texts, strict=True):
            words, asked = text.split(), prompt.split()
            echo = echo_bonus if words and asked and words[0] == asked[-1] else 0.0
            scores.append(words.count(target_word) - length_penalty * len(words) + echo)
        seen.append((list(prompts), list(texts)))
        given.append(torch.tensor(scores, dtype=torch.float64))
        return scores

    score_texts.given = given
    score_texts.seen = seen
    return score_texts


@dataclass
class ReferenceRun:
    """A reference PPOTrainer built for one scenario; satisfies the TargetRun protocol."""

    spec: ScenarioSpec
    trainer: object
    module: types.ModuleType
    pad_token_id: int
    stop_token_id: int
    reward: object = field(repr=False)
    tap: LogTap = field(repr=False)
    models: dict[str, torch.nn.Module] = field(repr=False, default_factory=dict)
    """The policy, reference and value model handed to the trainer (the harness recomputes with copies)."""
    prompts: torch.Tensor | None = field(repr=False, default=None)
    """The prompts handed to the trainer."""
    world_tokenizer: object = field(repr=False, default=None)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return getattr(self.trainer.optimizer, "optimizer", self.trainer.optimizer)

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.trainer.model.parameters() if p.requires_grad]

    @property
    def value_head(self) -> torch.nn.Module:
        """The value model's scalar head: the harness records its output per position (old and new values)."""
        return self.trainer.accelerator.unwrap_model(self.trainer.model).value_model.score

    @property
    def scores(self) -> list[torch.Tensor] | None:
        """Scores the reward callable gave, one tensor per rollout (this rank's samples); None under a reward
        model, whose scores the oracle reads from its head (`reward_model`)."""
        given = getattr(self.reward, "given", None)
        return None if given is None else list(given)

    @property
    def scored_texts(self) -> list[tuple[list[str], list[str]]] | None:
        """Under `--set reward=text`: per rollout, the (prompts, responses) strings the reward was given; else None."""
        seen = getattr(self.reward, "seen", None)
        return None if seen is None else list(seen)

    @property
    def tokenizer(self) -> object | None:
        """The world's tokenizer, which the reward on text decodes with (None under the other rewards)."""
        return self.world_tokenizer if self.scored_texts is not None else None

    @property
    def reward_model(self) -> torch.nn.Module | None:
        """The reward model (`--set reward=model`): the harness records its head's output and input ids per
        forward, and the oracle reads each row's score there; None under a reward callable."""
        return self.trainer.reward if isinstance(self.trainer.reward, torch.nn.Module) else None

    def train(self) -> list[dict[str, float]]:
        """Every update; the metrics as the trainer logged them (its callbacks and trackers), update k at step k."""
        returned = self.trainer.train()
        return self.tap.logged(returned, steps=range(self.spec.total_updates))


def build_config(spec: ScenarioSpec, stop_token_id: int):
    """The reference trainer's PPOConfig for a scenario."""
    from reference_trainers import PPOConfig

    return PPOConfig(
        per_device_train_batch_size=spec.per_device_train_batch_size,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        num_mini_batches=spec.num_mini_batches,
        num_ppo_epochs=spec.num_ppo_epochs,
        total_updates=spec.total_updates,
        learning_rate=spec.learning_rate,
        response_length=spec.response_length,
        temperature=spec.temperature,
        stop_token_id=stop_token_id,
        kl_coef=spec.kl_coef,
        kl_estimator=spec.kl_estimator,
        whiten_rewards=spec.whiten_rewards,
        missing_eos_penalty=spec.missing_eos_penalty,
        max_grad_norm=spec.max_grad_norm,
        cliprange=spec.cliprange,
        cliprange_value=spec.cliprange_value,
        vf_coef=spec.vf_coef,
        gamma=spec.gamma,
        lam=spec.lam,
        seed=spec.seed,
        local_rollout_forward_batch_size=spec.rollout_chunk,
    )


def factory(spec: ScenarioSpec, accelerator=None) -> ReferenceRun:
    """Build the reference trainer, toy models and a recording reward callable (or the toy reward model) for `spec`."""
    from accelerate import Accelerator

    from harness.targets.toy import toy_world
    from reference_trainers import ConfigError
    from reference_trainers import ppo as trainer

    world = toy_world(spec, prompt_pads=spec.prompt_pads)
    try:
        config = build_config(spec, stop_token_id=world.stop_token_id)
    except ConfigError as exc:
        raise HarnessConfigError(f"reference target: {exc}") from None
    recorder = text_reward() if spec.reward == "text" else scenario_reward()
    if spec.reward == "model":
        reward = world.reward_model
    elif spec.reward == "text":
        reward = trainer.decoded_reward(recorder, world.tokenizer)
    else:
        reward = recorder
    tap = LogTap()
    accelerator = accelerator or Accelerator(cpu=spec.device == "cpu")
    tap.attach(accelerator)
    ppo = trainer.PPOTrainer(
        config,
        world.policy,
        world.ref_policy,
        world.value_model,
        reward,
        world.prompts,
        world.pad_token_id,
        callbacks=[tap.callback],
        accelerator=accelerator,
    )
    models = {"policy": world.policy, "ref_policy": world.ref_policy, "value_model": world.value_model}
    return ReferenceRun(
        spec,
        ppo,
        trainer,
        world.pad_token_id,
        world.stop_token_id,
        recorder if spec.reward != "model" else reward,
        tap,
        models,
        world.prompts,
        world.tokenizer,
    )
