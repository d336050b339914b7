"""A compact PPO trainer for causal language models whose logged statistics are pooled exactly."""

from .config import ConfigError, PPOConfig, exact_div

__all__ = ["ConfigError", "PPOConfig", "PPOTrainer", "exact_div"]


def __getattr__(name: str):
    # torch and transformers load only when the trainer is asked for
    if name == "PPOTrainer":
        from .trainer import PPOTrainer

        return PPOTrainer
    raise AttributeError(name)
