"""Compact PPO and GRPO trainers for causal language models whose logged statistics are pooled exactly.

`ppo` (its configuration in `ppo_config`) and `grpo` (`grpo_config`) are the trainers; `common`
holds what both use; `toy` builds tiny offline models, a tokenizer and prompts to run them on.
"""

from .grpo_config import GRPOConfig
from .ppo_config import ConfigError, PPOConfig, exact_div

__all__ = ["ConfigError", "GRPOConfig", "GRPOTrainer", "PPOConfig", "PPOTrainer", "exact_div"]


def __getattr__(name: str):
    # torch and transformers load only when a trainer is asked for
    if name == "PPOTrainer":
        from .ppo import PPOTrainer

        return PPOTrainer
    if name == "GRPOTrainer":
        from .grpo import GRPOTrainer

        return GRPOTrainer
    raise AttributeError(name)
