"""The PPO trainer's one configuration object and the batch sizes derived from it (no torch needed).

`ConfigError` and `exact_div` serve the GRPO configuration too (grpo_config.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A configuration that cannot work; the message names the fields."""


def exact_div(a: int, b: int, what: str) -> int:
    """Return a // b, or raise ConfigError naming `what` when b does not divide a."""
    if b <= 0 or a % b != 0:
        raise ConfigError(f"{what}: {a} is not divisible by {b}")  # pragma: no mutate - message text only
    return a // b


@dataclass
class PPOConfig:
    """PPO hyper-parameters and batch geometry (TRL's names and meanings)."""

    per_device_train_batch_size: int = 4
    """Rows per micro-batch; the micro-batch loop steps by this."""
    gradient_accumulation_steps: int = 3
    """Local batch = per_device_train_batch_size * gradient_accumulation_steps."""
    num_mini_batches: int = 2
    """The local batch is split into this many minibatches; one optimizer step each."""
    num_ppo_epochs: int = 1
    """Passes over the rollout per update."""
    total_updates: int = 1
    """Number of rollout + optimisation rounds (`train()` runs this many)."""
    learning_rate: float = 3e-4
    """AdamW learning rate; 0 makes every ratio 1."""
    response_length: int = 12
    """New tokens sampled per prompt."""
    temperature: float = 1.0
    """Sampling temperature; logits are divided by it everywhere."""
    stop_token_id: int | None = None
    """Responses are truncated after the first occurrence of this token (None: no truncation)."""
    missing_eos_penalty: float | None = None
    """Subtracted from the score of responses without the stop token."""
    kl_coef: float = 0.05
    """Weight of the per-token KL penalty in the reward."""
    kl_estimator: str = "k1"
    """'k1' (log-ratio) or 'k3' ((r - 1) - log r)."""
    whiten_rewards: bool = False
    """Whiten the per-token rewards over the value mask before GAE."""
    cliprange: float = 0.2
    """Policy ratio clip epsilon."""
    cliprange_value: float = 0.2
    """Value prediction clip range around the rollout values."""
    vf_coef: float = 0.1
    """Weight of the value loss in the total loss."""
    gamma: float = 1.0
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda."""
    local_rollout_forward_batch_size: int = 64
    """Rows per forward pass during the rollout."""
    seed: int = 0
    """Seeds torch, numpy and python (transformers.set_seed)."""
    max_grad_norm: float | None = None
    """Clip the gradient norm at each optimizer step (None: no clipping)."""
    extra: dict = field(default_factory=dict)
    """Free-form notes carried into logs; never read by the algorithm."""

    # derived once in __post_init__
    local_batch_size: int = field(init=False)
    local_mini_batch_size: int = field(init=False)

    def __post_init__(self) -> None:
        positive = (
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "num_mini_batches",
            "num_ppo_epochs",
            "total_updates",
            "response_length",
            "local_rollout_forward_batch_size",
        )
        bad = [name for name in positive if getattr(self, name) <= 0]
        if bad:
            sizes = ", ".join(f"{name}={getattr(self, name)}" for name in bad)  # pragma: no mutate - message text
            raise ConfigError(f"these sizes must be positive integers: {sizes}")  # pragma: no mutate - message
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be positive, got {self.temperature}")  # pragma: no mutate - message
        if self.learning_rate < 0:
            raise ConfigError(f"learning_rate must be >= 0, got {self.learning_rate}")  # pragma: no mutate - message
        if self.kl_estimator not in ("k1", "k3"):
            raise ConfigError(f"kl_estimator must be k1 or k3: {self.kl_estimator!r}")  # pragma: no mutate - message
        self.local_batch_size = self.per_device_train_batch_size * self.gradient_accumulation_steps
        self.local_mini_batch_size = exact_div(
            self.local_batch_size,
            self.num_mini_batches,
            "local batch (per_device_train_batch_size * gradient_accumulation_steps "  # pragma: no mutate - message
            f"= {self.per_device_train_batch_size} * {self.gradient_accumulation_steps}) "
            "must be a multiple of num_mini_batches",  # pragma: no mutate - message text only
        )
