"""Response and value masks derived from response ids, and how a trainer's mask differs from them."""

from __future__ import annotations

import torch


def first_true(flags: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last axis, or its length where there is none."""
    width = flags.shape[-1]
    found = flags.any(dim=-1)
    first = flags.to(torch.int8).argmax(dim=-1)
    return torch.where(found, first, torch.full_like(first, width))


def truncated(responses: torch.Tensor, stop_token_id: int | None, pad_token_id: int) -> torch.Tensor:
    """The responses with every token after the first stop token replaced by pad (unchanged without a stop token)."""
    if stop_token_id is None:
        return responses
    positions = torch.arange(responses.shape[-1]).expand_as(responses)
    after_stop = positions > first_true(responses == stop_token_id).unsqueeze(-1)
    return torch.where(after_stop, torch.full_like(responses, pad_token_id), responses)


def derive_masks(
    responses: torch.Tensor, stop_token_id: int | None, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, V) boolean masks of shape (N, T) from raw response ids (docs/metrics.md, "Masks").

    Truncate after the first stop token (fill with pad); `sequence_length` is the first
    pad position minus one (T - 1 without pad); R = t <= sequence_length, V = t <= it + 1.
    """
    responses = truncated(torch.as_tensor(responses), stop_token_id, pad_token_id)
    positions = torch.arange(responses.shape[-1]).expand_as(responses)
    sequence_length = first_true(responses == pad_token_id) - 1
    response_mask = positions <= sequence_length.unsqueeze(-1)
    value_mask = positions <= (sequence_length + 1).unsqueeze(-1)
    return response_mask, value_mask


def mask_difference(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """How `got` differs from `want` (a phrase ending in 'from'), or None when they are equal."""
    if got.shape != want.shape:
        return f"of shape {tuple(got.shape)} does not match the shape {tuple(want.shape)} of"
    wrong = (got != want).nonzero()
    if wrong.numel() == 0:
        return None
    row, t = wrong[0].tolist()
    return f"differs at {wrong.shape[0]} positions (first: row {row}, t={t}) from"
