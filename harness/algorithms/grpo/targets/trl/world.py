"""The toy world of the `trl-grpo` target: the toy models of `reference_ppo.toy`, their logit biases, the
prompt dataset's size, and the deterministic reward functions handed to TRL."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

from harness.errors import HarnessConfigError
from harness.targets.hf import world_size
from reference_trainers.toy import add_logit_biases as add_logit_biases  # the toy world's own: a frozen head bias

from .config import weights_dtype

VOCAB_SIZE = 32
PROMPT_LENGTH = 6
EOS_LOGIT_BIAS = 2.0
"""Added to the EOS logit of the policy and the reference: completions of 8 tokens end at uneven lengths
(about one token in five is EOS), and some run to the limit (truncated)."""


def toy_reward(completion_ids: list[list[int]], **kwargs) -> list[float]:
    """The number of completion tokens whose id is a multiple of 3 (EOS excluded): deterministic, uneven in a group."""
    return [float(sum(1 for t in ids if t % 3 == 0 and t > 2)) for ids in completion_ids]


def multiple_of_3_partial(completion_ids: list[list[int]], **kwargs) -> list[float | None]:
    """1 for a completion with a token whose id is a multiple of 3 (EOS excluded), else 0: rewards tie, so some
    groups have std 0. None (cannot score) for a completion whose first token is a multiple of 4, or that is empty."""
    return [
        None if not ids or ids[0] % 4 == 0 else float(s > 0)
        for ids, s in zip(completion_ids, toy_reward(completion_ids))
    ]


def stopped_partial(completion_ids: list[list[int]], **kwargs) -> list[float | None]:
    """1 for a completion that ends with EOS, else 0; None where its first token is a multiple of 4 or odd."""
    stop = kwargs.get("eos_token_id", 1)
    return [None if not ids or ids[0] % 4 == 0 or ids[0] % 2 == 1 else float(ids[-1] == stop) for ids in completion_ids]


def completions_given(args: tuple, kwargs: dict) -> list[list[int]]:
    """The completions TRL hands a reward function: its `completion_ids` keyword (each row's ids in its mask)."""
    return kwargs["completion_ids"]


REWARD_MODEL = "reward_model"
"""The name TRL logs the toy world's reward model under (its `_name_or_path`)."""


def toy_rewards(spec) -> list[Callable]:
    """The reward functions of the spec's `reward_weights`: `toy_reward` for one weight (or none); for two, the two
    partial ones (the reference target's toy world has the same pattern: some completions neither can score); with
    `reward_model`, `toy_reward` alone (the model, the second, is the target's to add). Under `reward_order`
    'reversed' the two partial ones the other way round (their weights too: config.py hands `handed_weights`)."""
    weights = getattr(spec, "reward_weights", None)
    if weights is None or len(weights) == 1 or getattr(spec, "reward_model", False):
        return [toy_reward]
    funcs = [multiple_of_3_partial, stopped_partial]
    return funcs[::-1] if getattr(spec, "reward_order", "as_listed") == "reversed" else funcs


def prompt_count(spec, generations_per_epoch: int) -> int:
    """Prompts in the dataset: `generations_per_epoch` generation batches (each rank's share, every rank)."""
    steps_per_generation = spec.steps_per_generation or spec.gradient_accumulation_steps
    completions = spec.per_device_train_batch_size * steps_per_generation * world_size()
    if completions % spec.num_generations:
        raise HarnessConfigError(
            f"trl-grpo target: a generation batch of {completions} completions is not a whole number of "
            f"groups of num_generations={spec.num_generations}"
        )
    return generations_per_epoch * completions // spec.num_generations


def generations_trained(spec) -> int:
    """Generation batches the run's micro-batches take, the last perhaps in part."""
    per_generation = (spec.steps_per_generation or spec.gradient_accumulation_steps) * spec.num_iterations
    return -(-sum(spec.run_windows()) // per_generation)


def world_spec(spec, generations_per_epoch: int) -> types.SimpleNamespace:
    """What `harness.targets.toy.toy_world` builds this target's models and prompts from."""
    return types.SimpleNamespace(
        seed=spec.seed,
        device=spec.device,
        dtype=weights_dtype(spec.dtype),  # float32 weights under TRL's mixed precision (config.py)
        vocab_size=VOCAB_SIZE,
        prompt_length=PROMPT_LENGTH,
        num_prompts=prompt_count(spec, generations_per_epoch),
        pad_logit_bias=0.0,  # set with the EOS bias (logit_biases): the head has one bias vector
        prompt_pads=getattr(spec, "prompt_pads", 0),
        dropout=getattr(spec, "dropout", 0.0),
    )


def prompt_texts(prompts: torch.Tensor, pad: int) -> list[str]:
    """The dataset's prompt texts: each prompt's real tokens, its left pads dropped (TRL pads the prompts of a
    batch itself), each text ending with a space, as a real tokenizer's decoded completion begins with one (TRL
    scores a reward model on prompt and completion text joined as strings; the same tokens either way for the
    policy)."""
    return [" ".join(f"w{t}" for t in row if t != pad) + " " for row in prompts.tolist()]


def encoded_prompts(tokenizer: Any, texts: list[str], prompts: torch.Tensor, pad: int) -> torch.Tensor:
    """The prompts as the forward recompute reads them: each text's token ids, left-padded with `pad` to the
    toy world's prompt length, which must be the toy world's own prompts (HarnessConfigError otherwise: the
    harness would explain the rows by prompts the trainer was not given)."""
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    width = prompts.shape[1]
    padded = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in encoded], dtype=torch.long)
    if padded.shape != prompts.shape or not torch.equal(padded, prompts.cpu()):
        raise HarnessConfigError("trl-grpo target: the prompt texts do not encode to the toy world's prompts")
    return padded


def logit_biases(spec, world: Any) -> dict[int, float]:
    """Frozen LM-head biases of the toy policy and reference: the spec's stop bias on EOS (EOS_LOGIT_BIAS where it
    sets none), the spec's pad bias on pad."""
    biases = {world.stop_token_id: getattr(spec, "stop_logit_bias", 0.0) or EOS_LOGIT_BIAS}
    if getattr(spec, "pad_logit_bias", 0.0):
        biases[world.pad_token_id] = float(spec.pad_logit_bias)
    return biases
