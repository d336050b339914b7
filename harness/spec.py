"""ScenarioSpec: everything a target needs to build and run a trainer for one scenario."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class ScenarioSpec:
    """One trainer run, described without reference to any trainer's own config class."""

    name: str = "uneven_split"
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 3
    num_mini_batches: int = 2
    num_ppo_epochs: int = 1
    total_updates: int = 1
    learning_rate: float = 3e-4
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    response_length: int = 12
    temperature: float = 1.0
    kl_coef: float = 0.05
    kl_estimator: str = "k1"
    cliprange: float = 0.2
    cliprange_value: float = 0.2
    vf_coef: float = 0.1
    gamma: float = 1.0
    lam: float = 0.95
    whiten_rewards: bool = False
    vocab_size: int = 32
    prompt_length: int = 6
    num_prompts: int = 48
    rollout_chunk: int = 64
    """Rows per rollout forward pass (local_rollout_forward_batch_size)."""
    pad_logit_bias: float = 0.0
    """Added to the policy's pad-token logit, so that some responses are empty (all-masked rows)."""
    # per-rank padding variety, used by multi-process scenarios
    rank: int = 0
    world_size: int = 1

    @property
    def local_batch_size(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    def with_(self, **changes) -> ScenarioSpec:
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)
