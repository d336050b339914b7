"""A toy trainer of the made-up algorithm: one linear layer, its per-token outputs' masked mean as the loss.

Each update cuts `rows` rows into micro-batches of `micro` rows, with ragged masks, and logs
`toy/token_mean`: the token mean of every per-token value of the update (the contract), or,
with `flat=True`, the flat mean of the micro-batches' own means (the bug).
"""

from __future__ import annotations

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis=None) -> torch.Tensor:
    """The mean of `values` where `mask` is set."""
    return (values * mask).sum() / mask.sum()


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Present for the spy's sake; this trainer never calls it."""
    return torch.gather(logits.log_softmax(-1), -1, index.unsqueeze(-1)).squeeze(-1)


def train(model, optimizer, inputs, masks, micro: int, updates: int, flat: bool) -> list[dict[str, float]]:
    """`updates` updates over `inputs` (rows, T, 4); one logged dict per update."""
    logs = []
    for step in range(updates):
        total, count, means = 0.0, 0.0, []
        optimizer.zero_grad()
        for start in range(0, inputs.shape[0], micro):
            x, mask = inputs[start : start + micro], masks[start : start + micro]
            values = model(x).squeeze(-1)
            loss = masked_mean(values, mask)
            loss.backward()
            total += float((values * mask).sum().detach())
            count += float(mask.sum())
            means.append(float(loss.detach()))
        optimizer.step()
        logs.append({"toy/token_mean": sum(means) / len(means) if flat else total / count, "step": step})
    return logs
