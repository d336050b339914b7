"""ScenarioSpec: everything a PPO target needs to build and run a trainer for one scenario.

Also the geometry a run of it must have (`expected_rows`), checked independently of any
trainer's own config class, and the validation of sizes before any model work (exit 2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from harness import settings
from harness.errors import HarnessConfigError

from .instruments import INSTRUMENTS

if TYPE_CHECKING:
    from harness.instrument.observe import Instruments

SETTINGS = (
    "temperature",
    "kl_estimator",
    "kl_coef",
    "whiten_rewards",
    "missing_eos_penalty",
    "max_grad_norm",
    "cliprange",
    "cliprange_value",
    "vf_coef",
    "gamma",
    "lam",
    "dropout",
    "reward",
)
"""The trainer settings `verify --set KEY=VALUE` may change for the whole gate."""
KL_ESTIMATORS = ("k1", "k3")
REWARDS = ("callable", "model", "text")


@dataclass(frozen=True)
class ScenarioSpec:
    """One trainer run, described without reference to any trainer's own config class."""

    instruments: ClassVar[Instruments] = INSTRUMENTS
    """What observe installs around a run of this spec (its algorithm's instruments, instruments.py)."""
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
    missing_eos_penalty: float | None = None
    """Subtracted from the score of a response without the stop token (None: no penalty)."""
    max_grad_norm: float | None = None
    """Clip the gradient's global norm at each optimizer step (None: no clipping)."""
    reward: str = "callable"
    """What scores the rollout: `callable` (a function of the token ids, its scores handed to the oracle),
    `model` (a toy reward model, a sequence-classification model whose head the harness records) or `text` (a
    function of the decoded prompt and response, which records the strings it was given and its scores)."""
    vocab_size: int = 32
    prompt_length: int = 6
    num_prompts: int = 48
    rollout_chunk: int = 64
    """Rows per rollout forward pass (local_rollout_forward_batch_size)."""
    pad_logit_bias: float = 0.0
    """Added to the policy's pad-token logit, so that some responses are empty (all-masked rows)."""
    prompt_pads: int = 0
    """Left padding of the prompts: prompt i starts with i % (prompt_pads + 1) pad tokens."""
    dropout: float = 0.0
    """Attention dropout of every toy model: a trainer must not let it act (at LR 0 every ratio is still 1)."""
    # per-rank padding variety, used by multi-process scenarios
    rank: int = 0
    world_size: int = 1

    @property
    def local_batch_size(self) -> int:
        """Rows of one rank's rollout batch."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    def with_(self, **changes) -> ScenarioSpec:
        """A copy with `changes`."""
        return replace(self, **changes)

    def as_dict(self) -> dict:
        """Plain data (e.g. for a rank's saved observation)."""
        return asdict(self)

    @property
    def split_label(self) -> str:
        """`bs=4,gas=3,mb=2,epochs=1`: the split, as failure lines name it."""
        return (
            f"bs={self.per_device_train_batch_size},gas={self.gradient_accumulation_steps},"
            f"mb={self.num_mini_batches},epochs={self.num_ppo_epochs}"
        )

    def expected_rows(self) -> list[int]:
        """Micro-batch row counts of one update, e.g. [4, 2, 4, 2] for 4, 3, 2 and one epoch."""
        mini = self.local_batch_size // self.num_mini_batches
        step = self.per_device_train_batch_size
        one_minibatch = [min(step, mini - start) for start in range(0, mini, step)]
        return one_minibatch * self.num_mini_batches * self.num_ppo_epochs

    @property
    def steps_per_update(self) -> int:
        """Optimizer steps of one update: one per minibatch per epoch."""
        return self.num_mini_batches * self.num_ppo_epochs

    def validate(self) -> None:
        """Reject a geometry no trainer can run, before any model work (HarnessConfigError, exit 2)."""
        sizes = {
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "num_mini_batches": self.num_mini_batches,
            "num_ppo_epochs": self.num_ppo_epochs,
            "total_updates": self.total_updates,
            "response_length": self.response_length,
        }
        bad = [f"{k}={v}" for k, v in sizes.items() if v <= 0]
        if bad:
            raise HarnessConfigError("sizes must be positive: " + ", ".join(bad))
        if not 0 <= self.prompt_pads < self.prompt_length:
            raise HarnessConfigError(f"prompt_pads={self.prompt_pads}: must be at least 0 and below prompt_length")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise HarnessConfigError(f"kl_estimator={self.kl_estimator!r}: expected one of {', '.join(KL_ESTIMATORS)}")
        if self.temperature <= 0:
            raise HarnessConfigError(f"temperature={self.temperature}: must be positive")
        if not 0 <= self.dropout < 1:
            raise HarnessConfigError(f"dropout={self.dropout}: must be in [0, 1)")
        if self.reward not in REWARDS:
            raise HarnessConfigError(f"reward={self.reward!r}: expected one of {', '.join(REWARDS)}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise HarnessConfigError(f"max_grad_norm={self.max_grad_norm}: must be positive (or none)")
        if self.local_batch_size % self.num_mini_batches:
            raise HarnessConfigError(
                f"local batch {self.per_device_train_batch_size}*{self.gradient_accumulation_steps}"
                f"={self.local_batch_size} is not divisible by num_mini_batches={self.num_mini_batches}"
            )


def parse_settings(assignments: list[str]) -> dict[str, Any]:
    """`["temperature=0.7", "kl_estimator=k3"]` -> {"temperature": 0.7, ...}; HarnessConfigError listing the keys."""
    return settings.parse_settings(assignments, ScenarioSpec, SETTINGS)
