"""Tiny, offline, seeded models, tokenizer and prompts for tests, examples and the harness.

Nothing here downloads: models are built from a config, the tokenizer from the
`tokenizers` package, and prompts are drawn from a seeded generator.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import torch

PAD, EOS, BOS = "[PAD]", "[EOS]", "[BOS]"


@dataclass
class ToyWorld:
    """Everything a PPO run needs, built offline from a seed."""

    tokenizer: object
    policy: torch.nn.Module
    ref_policy: torch.nn.Module
    value_model: torch.nn.Module
    reward_model: torch.nn.Module
    prompts: torch.Tensor
    pad_token_id: int
    stop_token_id: int


def build_tokenizer(vocab_size: int = 32):
    """A word-level tokenizer over `[PAD] [EOS] [BOS] w3 ... w{vocab_size-1}`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8, got {vocab_size}")
    vocab = {PAD: 0, EOS: 1, BOS: 2}
    vocab.update({f"w{i}": i for i in range(3, vocab_size)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, bos_token=BOS, padding_side="left"
    )


def tiny_config(vocab_size: int, hidden_size: int = 32, layers: int = 2, **extra):
    """A two-layer Llama config small enough to train on one CPU core, with context-dependent outputs."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=False,
        # wider than transformers' 0.02, so that next-token distributions depend on the
        # context the way a trained model's do, instead of being all but uniform
        initializer_range=0.2,
        **extra,
    )


def _seeded(seed: int, build):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def build_world(
    seed: int = 0,
    vocab_size: int = 32,
    prompt_length: int = 6,
    num_prompts: int = 48,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    independent_ref: bool = False,
    pad_logit_bias: float = 0.0,
    prompt_pads: int = 0,
    dropout: float = 0.0,
    stop_logit_bias: float = 0.0,
) -> ToyWorld:
    """Policy, frozen reference, value model, reward model and prompts, all from `seed`.

    The reference starts as a copy of the policy, unless `independent_ref`, which
    draws it from its own seed so that the KL terms are non-zero from the first update.
    `pad_logit_bias` adds a bias to the pad logit of both policies, so that some
    responses start with pad (empty responses, all-masked micro-batches).
    `stop_logit_bias` adds a bias to the stop (EOS) logit of both policies, so that responses end early.
    `prompt_pads` left-pads the prompts: prompt i starts with i % (prompt_pads + 1) pad tokens.
    `dropout` is the attention dropout of every model (Llama's `attention_dropout`, applied
    while a model is in training mode; Llama has no other dropout), so that a trainer that
    leaves dropout on can be told from one that does not.

    Each call returns a world of its own, a deep copy of the one these arguments built first in this process
    (`pristine_world`): the same values, tensor for tensor, as building it again, and nothing shared with another
    call's world. A copy costs less than a build (transformers' model constructors and initialisers).
    """
    return copy.deepcopy(pristine_world(seed, vocab_size, prompt_length, num_prompts, str(device), dtype,
                                        independent_ref, pad_logit_bias, prompt_pads, dropout, stop_logit_bias))


@functools.lru_cache(maxsize=8)
def pristine_world(seed, vocab_size, prompt_length, num_prompts, device, dtype, independent_ref, pad_logit_bias,
                   prompt_pads, dropout, stop_logit_bias) -> ToyWorld:  # fmt: skip
    """The world of `build_world`'s arguments (the device a string), built; the last eight kept in this process and
    never handed out (`build_world` copies them). No global random state is read or moved: each model is drawn under
    its own seed inside `torch.random.fork_rng`, the prompts from a generator of their own."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    tokenizer = build_tokenizer(vocab_size)
    config = tiny_config(vocab_size, attention_dropout=dropout)
    policy = _seeded(seed, lambda: AutoModelForCausalLM.from_config(config))
    ref_policy = _seeded(seed + 4 if independent_ref else seed, lambda: AutoModelForCausalLM.from_config(config))
    head_config = tiny_config(vocab_size, num_labels=1, attention_dropout=dropout)
    value_model = _seeded(seed + 1, lambda: AutoModelForSequenceClassification.from_config(head_config))
    reward_model = _seeded(seed + 2, lambda: AutoModelForSequenceClassification.from_config(head_config))
    generator = torch.Generator().manual_seed(seed + 3)
    prompts = torch.randint(3, vocab_size, (num_prompts, prompt_length), generator=generator)
    if not 0 <= prompt_pads < prompt_length:
        raise ValueError(f"prompt_pads must be in [0, {prompt_length}), got {prompt_pads}")
    for i in range(num_prompts):
        prompts[i, : i % (prompt_pads + 1)] = tokenizer.pad_token_id
    for model in (policy, ref_policy, value_model, reward_model):
        model.to(device=device, dtype=dtype)
    for model in (policy, ref_policy):
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    biases = {token: bias for token, bias in ((tokenizer.pad_token_id, pad_logit_bias),
                                               (tokenizer.eos_token_id, stop_logit_bias)) if bias}  # fmt: skip
    if biases:
        for model in (policy, ref_policy):
            add_logit_biases(model, biases)
    ref_policy.requires_grad_(False)
    reward_model.requires_grad_(False)
    return ToyWorld(
        tokenizer=tokenizer,
        policy=policy,
        ref_policy=ref_policy,
        value_model=value_model,
        reward_model=reward_model,
        prompts=prompts,
        pad_token_id=tokenizer.pad_token_id,
        stop_token_id=tokenizer.eos_token_id,
    )


def add_pad_bias(model: torch.nn.Module, pad_token_id: int, bias: float) -> None:
    """Give the LM head a (frozen) bias that favours the pad token."""
    add_logit_biases(model, {pad_token_id: bias})


def add_logit_biases(model: torch.nn.Module, biases: dict[int, float]) -> None:
    """Give the LM head a (frozen) bias vector: `biases` by token id, 0 elsewhere."""
    head = model.get_output_embeddings()
    values = torch.zeros(head.out_features, device=head.weight.device, dtype=head.weight.dtype)
    for token, bias in biases.items():
        values[token] = bias
    head.bias = torch.nn.Parameter(values, requires_grad=False)


def count_token_reward(target_token: int):
    """A reward callable: the number of `target_token` in each (truncated) response."""

    def reward(queries: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        return (responses == target_token).sum(dim=1).to(torch.float32)

    return reward
