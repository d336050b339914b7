"""tinyppo: a small PPO trainer for causal language models, held to ppo-stats-harness."""

from .trainer import Settings, TinyPPO

__all__ = ["Settings", "TinyPPO"]
