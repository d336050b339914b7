"""Release 0.1.0's reference GRPO trainer (`trainer`, `grpo_config`, `ppo_config`, `common`, `toy`) and its target
(`target:factory`), frozen (tests/support/release_0_1_0/__init__.py)."""
