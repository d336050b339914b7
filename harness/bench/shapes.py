"""The Llama shapes of the bench's scaled models (random weights built from a config, nothing downloaded).

Both an algorithm's bench sizes and the targets that build their models (PPO's
harness/algorithms/ppo/targets/scaled.py, GRPO's live bench run harness/algorithms/grpo/targets/live/bench.py) read
them, and `llama_config`, from here, so that a target never imports the sizes that name it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """A Llama shape: what `LlamaConfig` needs besides the vocabulary."""

    hidden_size: int
    layers: int
    intermediate_size: int
    heads: int
    kv_heads: int
    initializer_range: float = 0.02
    """0.02 is transformers' default: next-token distributions close to uniform over 32k, as at init."""

    def describe(self) -> str:
        """`Llama h=1024 L=4 ffn=2816 heads=16/4`."""
        return (
            f"Llama h={self.hidden_size} L={self.layers} ffn={self.intermediate_size}"
            f" heads={self.heads}/{self.kv_heads}"
        )


MEDIUM_SHAPE = ModelShape(hidden_size=1024, layers=4, intermediate_size=2816, heads=16, kv_heads=4)
"""~110M parameters per model at vocabulary 32k: the medium size's, and the live bench's policy."""
LARGE_SHAPE = ModelShape(hidden_size=2048, layers=22, intermediate_size=5632, heads=32, kv_heads=4)
"""TinyLlama's shape, 1.1B parameters per model: the large size's."""
MAX_POSITIONS = 2048
"""Rotary positions, computed on the fly: a bound only (prompt + response must stay below it)."""


def llama_config(shape: ModelShape, vocab_size: int, max_positions: int, **extra):
    """A LlamaConfig of `shape` with the toy world's special tokens (pad 0, eos 1, bos 2)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=max_positions,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=False,
        initializer_range=shape.initializer_range,
        **extra,
    )
