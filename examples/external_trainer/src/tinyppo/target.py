"""tinyppo held to ppo-stats-harness: `ppo-verify --target tinyppo.target:factory`.

`factory(spec)` builds a `TinyPPO` for one scenario of the gate: the spec's batch geometry and
hyper-parameters mapped onto `Settings`, tiny offline models from `reference_trainers.toy`, and a
reward function that keeps every score it gives (so that the gate checks `objective/scores`).
tinyppo names its call sites its own way, so the run hands the gate a `SiteMap`.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch

from harness.algorithms.ppo.contract import SiteMap
from harness.algorithms.ppo.spec import ScenarioSpec
from tinyppo import trainer

SITES = SiteMap(
    logprob="old_lp",  # rollout log-probs of the policy
    ref_logprob="ref_lp",  # rollout log-probs of the reference
    new_logprobs="cur_lp",  # log-probs of one forward/backward pass
    pg_loss="policy_term",
    pg_clipfrac="policy_clipped",
    vf_loss="value_term",
    vf_clipfrac="value_clipped",
    whiten="whiten",  # its whitening function: the masked_mean inside it sees the raw advantages
)


def recording_reward(pad_id: int, token: int = 7, length_penalty: float = 0.05):
    """Score = how often `token` appears, minus a penalty per response token; every score is kept."""
    given: list[torch.Tensor] = []

    def reward(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        score = (responses == token).sum(dim=1).double() - length_penalty * (responses != pad_id).sum(dim=1).double()
        given.append(score.detach().cpu())
        return score.float()

    reward.given = given
    return reward


def settings_for(spec: ScenarioSpec) -> trainer.Settings:
    """The gate's scenario in tinyppo's words."""
    return trainer.Settings(
        batch_rows=spec.local_batch_size,
        minibatches=spec.num_mini_batches,
        rows_per_pass=spec.per_device_train_batch_size,
        epochs=spec.num_ppo_epochs,
        updates=spec.total_updates,
        lr=spec.learning_rate,
        new_tokens=spec.response_length,
        temperature=spec.temperature,
        kl_weight=spec.kl_coef,
        kl_kind=spec.kl_estimator,
        clip=spec.cliprange,
        value_clip=spec.cliprange_value,
        value_weight=spec.vf_coef,
        gamma=spec.gamma,
        lam=spec.lam,
        whiten_rewards=spec.whiten_rewards,
        no_stop_penalty=spec.missing_eos_penalty,
        grad_clip=spec.max_grad_norm,
        rollout_rows=spec.rollout_chunk,
        seed=spec.seed,
    )


@dataclass
class TinyRun:
    """One TinyPPO run as the gate sees it (the TargetRun protocol of ppo-stats-harness)."""

    ppo: trainer.TinyPPO
    pad_token_id: int
    stop_token_id: int
    reward: object = field(repr=False)
    module: types.ModuleType = trainer
    site_map: SiteMap = SITES

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.ppo.opt

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return self.ppo.params

    @property
    def value_head(self) -> torch.nn.Module:
        """The value model's `score` head, whose output the gate records (old and new values)."""
        return self.ppo.value_model.score

    @property
    def models(self) -> dict[str, torch.nn.Module]:
        """The networks the gate recomputes the log-probs and values with (transformers models of the toy world)."""
        return {"policy": self.ppo.policy, "ref_policy": self.ppo.ref_policy, "value_model": self.ppo.value_model}

    @property
    def prompts(self) -> torch.Tensor:
        """The prompts tinyppo draws its queries from."""
        return self.ppo.prompts

    @property
    def scores(self) -> list[torch.Tensor]:
        """The scores handed to the trainer, one tensor per update."""
        return list(self.reward.given)

    def train(self) -> list[dict[str, float]]:
        return self.ppo.train()


def build(spec: ScenarioSpec, trainer_class: type[trainer.TinyPPO] = trainer.TinyPPO) -> TinyRun:
    """A run of `trainer_class` for `spec` on the toy world of its seed."""
    from reference_trainers.toy import build_world

    world = build_world(
        seed=spec.seed,
        vocab_size=spec.vocab_size,
        prompt_length=spec.prompt_length,
        num_prompts=spec.num_prompts,
        device=spec.device,
        dtype=getattr(torch, spec.dtype),
        independent_ref=True,
        pad_logit_bias=spec.pad_logit_bias,
        prompt_pads=spec.prompt_pads,
        dropout=spec.dropout,
    )
    reward = recording_reward(world.pad_token_id)
    ppo = trainer_class(
        settings_for(spec),
        world.policy,
        world.ref_policy,
        world.value_model,
        reward,
        world.prompts,
        pad_id=world.pad_token_id,
        stop_id=world.stop_token_id,
    )
    return TinyRun(ppo, world.pad_token_id, world.stop_token_id, reward)


def factory(spec: ScenarioSpec) -> TinyRun:
    """The gate's entry point: `--target tinyppo.target:factory`."""
    return build(spec)


factory.algorithm = "ppo"  # the gate whose checks it runs: the harness never guesses it
factory.contract_version = 1  # written for PPO contract 1 (`python -m harness --version`): a later change is named
