"""What the PPO and the GRPO trainer share, where it is the same thing in both.

Read top-down in the order a rollout uses it: the masked mean, log-probs and entropy from
logits, then sampling (truncation at the stop token and the response mask, model inputs that
ignore pad tokens, temperature-scaled logits, head outputs, the sampler), the scores of a reward
callable or model, and the per-token KL estimate.

Each trainer imports these names into its own module and looks them up there at call time, so
that a test can monkeypatch `masked_mean`, `selective_log_softmax` or `entropy_from_logits` on
the trainer's module (ppo.py, grpo.py); a call made here (`policy_logits` calling `model_inputs`)
looks up this module's name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Reward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | nn.Module
Callback = Callable[[dict, int], None]


# ---------------------------------------------------------------- masked mean, log-probs and entropy


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is true; 0 (not NaN) where the mask is empty."""
    mask = mask.to(values.dtype)
    if axis is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim=axis) / mask.sum(dim=axis).clamp(min=1)


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """`x` in float32 when it is narrower (bfloat16, float16), as it is otherwise: float64 stays float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[index] per position, one row at a time to bound memory."""
    rows = [
        torch.log_softmax(at_least_float32(row), dim=-1).gather(-1, ids.unsqueeze(-1))
        for row, ids in zip(logits, index)
    ]
    return torch.stack(rows).squeeze(-1).to(logits.dtype)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of softmax(logits)."""
    logits = at_least_float32(logits)
    return torch.logsumexp(logits, dim=-1) - (F.softmax(logits, dim=-1) * logits).sum(dim=-1)


# ---------------------------------------------------------------- rollout


def truncate_at_stop(responses: torch.Tensor, stop_token_id: int | None, pad_token_id: int) -> torch.Tensor:
    """Keep each response up to and including its first stop token; pad the rest."""
    if stop_token_id is None:
        return responses
    is_stop = (responses == stop_token_id).int()
    after_stop = (is_stop.cumsum(dim=1) - is_stop) > 0
    return responses.masked_fill(after_stop, pad_token_id)


def response_masks(postprocessed: torch.Tensor, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sequence_lengths, R, V): last real position per row, response mask, value mask (one more)."""
    length = postprocessed.shape[1]
    is_pad = postprocessed == pad_token_id
    first_pad = torch.where(
        is_pad.any(dim=1), is_pad.int().argmax(dim=1), torch.full_like(is_pad[:, 0], length, dtype=torch.long)
    )
    sequence_lengths = first_pad - 1
    positions = torch.arange(length, device=postprocessed.device).unsqueeze(0)
    return sequence_lengths, positions <= sequence_lengths.unsqueeze(1), positions <= sequence_lengths.unsqueeze(1) + 1


def model_inputs(query_responses: torch.Tensor, pad_token_id: int) -> dict:
    """Attention mask and position ids that ignore pad tokens (left-padded prompts work too)."""
    attention_mask = query_responses != pad_token_id
    position_ids = attention_mask.long().cumsum(dim=1) - attention_mask.long()
    return {
        "input_ids": query_responses.masked_fill(~attention_mask, 0),
        "attention_mask": attention_mask,
        "position_ids": position_ids.clamp(min=0),
    }


def policy_logits(
    policy: nn.Module, query_responses: torch.Tensor, context_length: int, pad_token_id: int, temperature: float
) -> torch.Tensor:
    """Temperature-scaled logits of the response positions, shape (B, T, V)."""
    out = policy(**model_inputs(query_responses, pad_token_id), return_dict=True)
    return out.logits[:, context_length - 1 : -1] / temperature


def head_outputs(model: nn.Module, query_responses: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """Per-token scalar head output (B, L) of a sequence-classification model (value or reward)."""
    backbone = getattr(model, model.base_model_prefix)
    hidden = backbone(**model_inputs(query_responses, pad_token_id), return_dict=True).last_hidden_state
    return model.score(hidden).squeeze(-1)


def sample_responses(
    policy: nn.Module,
    queries: torch.Tensor,
    length: int,
    temperature: float,
    stop_token_id: int | None,
    pad_token_id: int,
) -> torch.Tensor:
    """Sample `length` tokens per query at `temperature` (padded after an early stop at `stop_token_id`)."""
    from transformers import GenerationConfig

    generation = GenerationConfig(
        max_new_tokens=length,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        eos_token_id=stop_token_id,
        pad_token_id=pad_token_id,
    )
    inputs = model_inputs(queries, pad_token_id)
    out = policy.generate(
        input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], generation_config=generation
    )
    responses = out[:, queries.shape[1] :]
    return F.pad(responses, (0, length - responses.shape[1]), value=pad_token_id)


def sequence_scores(
    reward: Reward,
    queries: torch.Tensor,
    postprocessed: torch.Tensor,
    sequence_lengths: torch.Tensor,
    pad_token_id: int,
) -> torch.Tensor:
    """One score per sequence: a reward model's head at the last real token, or a callable's output."""
    if not isinstance(reward, nn.Module):
        return reward(queries, postprocessed).to(device=queries.device, dtype=torch.float32)
    per_token = head_outputs(reward, torch.cat([queries, postprocessed], dim=1), pad_token_id)
    last = (queries.shape[1] + sequence_lengths).clamp(min=queries.shape[1] - 1)
    return per_token[torch.arange(len(last), device=last.device), last].float()


# ---------------------------------------------------------------- KL


def kl_per_token(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL(policy || ref) estimate: k1 = log p - log q, k3 = (q/p - 1) - log(q/p)."""
    log_ratio = ref_logprobs - logprobs
    return -log_ratio if estimator == "k1" else log_ratio.exp() - 1 - log_ratio
