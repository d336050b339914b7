"""Tensor copies and per-position reductions the instruments make at record time, a few positions at a time.

The `(B, T, V)` logits are never kept: the spy reduces them to a per-token entropy and to the
gap between the returned log-probs and log_softmax(logits)[index], so memory stays flat in
the vocabulary. torch is imported where it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ENTROPY_CHUNK_ELEMENTS = 1 << 18
"""Logit elements converted to float64 at once when computing entropies on the CPU (2 MiB: the
passes over a chunk stay in the core's cache; 32 MiB chunks ran 4x slower at vocabulary 32k)."""
ENTROPY_CHUNK_ELEMENTS_GPU = 1 << 24
"""The same on a GPU (128 MiB), where the cost is in kernel launches, not in cache misses."""


def token_entropy(logits: torch.Tensor, chunk_elements: int | None = None) -> torch.Tensor:
    """Per-position entropy of softmax(logits) over the last axis, float64 on CPU (see `reduce_logits`)."""
    return reduce_logits(logits, chunk_elements=chunk_elements)[0]


def logprob_gap(
    logits: torch.Tensor, index: torch.Tensor, logprobs: Any, chunk_elements: int | None = None
) -> torch.Tensor:
    """|returned log-prob - log_softmax(logits)[index]| per position, float64 on the CPU (see `reduce_logits`)."""
    return reduce_logits(logits, index, logprobs, chunk_elements)[1]


def entropy_at_infinities(entropy: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """`entropy` (per row) with the value it takes where the row's largest logit `top` is infinite: +inf for a row
    with a +inf logit, -inf for a row of only -inf (as `logsumexp(l) - sum(softmax(l) * l)` gives); a row with a
    NaN (whose `top` is NaN) keeps its NaN. Both ways of computing an entropy here end with it."""
    return entropy.masked_fill(top == float("inf"), float("inf")).masked_fill(top == float("-inf"), float("-inf"))


def log_softmax_f64(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_softmax(rows), entropy of softmax(rows)) over the last axis of float64 `rows`, as `reduce_logits`
    defines them at infinite logits: a -inf logit (a masked token) adds nothing to the entropy (its term `p * log p`
    is 0, not 0 * -inf = NaN) and its log-prob is -inf; `entropy_at_infinities` gives the rows with no finite
    largest logit. For the other logits, `-sum(exp(log_p) * log_p)` of `torch.log_softmax`, whose numbers
    differ from `reduce_logits`'s by rounding only."""
    import torch

    log_p = torch.log_softmax(rows, dim=-1)
    p = log_p.exp()
    entropy = -torch.where(p == 0, 0.0, p * log_p).sum(dim=-1)
    return log_p, entropy_at_infinities(entropy, rows.amax(dim=-1))


def reduce_logits(
    logits: torch.Tensor, index: Any = None, logprobs: Any = None, chunk_elements: int | None = None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(per-position entropy, |logprobs - log_softmax(logits)[index]| or None, per-position variance of
    log softmax(logits) under softmax(logits)), float64 on CPU, in one pass.

    Computed in float64, a few positions at a time into two reused buffers, so that no float64
    copy of the whole logits tensor is ever made: with `m` the row's max, `z = l - m`, `e =
    exp(z)` and `s = sum(e)`, `H = logsumexp(l) - sum(softmax(l) * l) = log(s) - sum(e * z) / s`
    (one exponential per logit), and `log_softmax(l)[y] = z[y] - log(s)`. A logit of -inf adds
    nothing (its `z` is clamped to the lowest finite float64, whose `e` is 0); a row of only -inf
    has entropy -inf and a row with +inf has +inf (NaN with a NaN): `entropy_at_infinities`, as in
    `log_softmax_f64`, the recomputation of the logit functions (logits.py). The log-prob gap is
    what a `selective_log_softmax` call got wrong given its own inputs (a gather at the wrong
    positions shows as O(1)); it is taken when `index` is given. The
    variance of the log-probability of a token drawn from softmax(l) (what `sampling` needs to judge
    how far the drawn tokens' log-probs may stray from the entropy) is that of `z` under it:
    `sum(e * z^2) / s - (sum(e * z) / s)^2`.
    """
    import torch

    with torch.no_grad():
        flat = logits.detach().reshape(-1, logits.shape[-1])
        device = flat.device if flat.device.type != "mps" else torch.device("cpu")
        if chunk_elements is None:
            chunk_elements = ENTROPY_CHUNK_ELEMENTS if device.type == "cpu" else ENTROPY_CHUNK_ELEMENTS_GPU
        total, vocab = flat.shape
        rows = max(1, min(total, chunk_elements // max(1, vocab)))
        out = torch.empty(total, dtype=torch.float64, device=device)
        spread = torch.empty(total, dtype=torch.float64, device=device)
        gap = None
        if index is not None:
            ids = torch.as_tensor(index).detach().reshape(-1, 1).to(device)
            got = torch.as_tensor(logprobs).detach().reshape(-1).to(device=device, dtype=torch.float64)
            gap = torch.empty(total, dtype=torch.float64, device=device)
        z = torch.empty((rows, vocab), dtype=torch.float64, device=device)
        e = torch.empty_like(z)
        lowest = torch.finfo(torch.float64).min
        for start in range(0, total, rows):
            n = min(rows, total - start)
            zc, ec = z[:n], e[:n]
            zc.copy_(flat[start : start + n])
            top = zc.amax(dim=-1, keepdim=True)
            row_top = top.squeeze(-1).clone()  # (a row with a NaN has a NaN max)
            top.masked_fill_(top.isinf(), 0.0)
            zc.sub_(top).clamp_(min=lowest)
            torch.exp(zc, out=ec)
            s = ec.sum(dim=-1)
            log_s = s.log()
            if gap is not None:
                want = zc.gather(-1, ids[start : start + n]).squeeze(-1) - log_s
                gap[start : start + n] = (got[start : start + n] - want).abs()
            ez = ec.mul_(zc).sum(dim=-1)  # e * z (0 where e is 0: z is finite)
            ez2 = ec.mul_(zc).sum(dim=-1)  # e * z^2
            value = torch.where(s > 0, log_s - ez / s, log_s)
            out[start : start + n] = entropy_at_infinities(value, row_top)
            spread[start : start + n] = (ez2 / s - (ez / s) ** 2).clamp_(min=0.0)
    entropy = out.cpu().reshape(logits.shape[:-1])
    gap = None if gap is None else gap.cpu().reshape(torch.as_tensor(index).shape)
    return entropy, gap, spread.cpu().reshape(logits.shape[:-1])


def _copy(tensor: Any, dtype: torch.dtype) -> torch.Tensor | None:
    """A detached CPU copy of `tensor` (or of a Python number or list) in `dtype`; None for None."""
    import torch

    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        return torch.as_tensor(tensor, dtype=dtype)
    return tensor.detach().to(device="cpu", dtype=dtype, copy=True)


def _dtype_name(tensor: Any) -> str | None:
    """'float32' for a float32 tensor; None for non-tensors."""
    dtype = getattr(tensor, "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")
