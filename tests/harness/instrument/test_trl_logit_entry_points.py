"""The gaps `LogitGaps` keeps at the log-prob functions of TRL's later releases (harness/instrument/logits.py):
`selective_log_softmax_and_entropy` (TRL 1.14) and a fused LM head (TRL 1.15 on), held to functions written here
with the same signatures, one right and one wrong."""

from __future__ import annotations

import torch

from harness.instrument.logits import LogitGaps, head_f64

TEMPERATURE = 0.7


def _joint(logits, index, entropy_requires_grad=True, temperature=1.0, row_mask=None):
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    logps = log_p.gather(-1, index.unsqueeze(-1)).squeeze(-1)
    entropies = -(log_p.exp() * log_p).sum(-1)
    if row_mask is not None:
        logps, entropies = logps * row_mask, entropies * row_mask
    return logps, entropies


def _head(hidden, weight, bias, targets, temperature, chunk_size, softcap=None, scale=1.0, outputs=None):
    logits = (hidden @ weight.T + bias) * scale / temperature
    return (*_joint(logits, targets), None, None, None)


def _inputs():
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 8, generator=generator)
    weight, bias = torch.randn(32, 8, generator=generator), torch.randn(32, generator=generator)
    return hidden, weight, bias, torch.randint(0, 32, (10,), generator=generator)


def test_the_joint_function_is_held_to_the_formula_of_its_scaled_logits():
    hidden, weight, bias, targets = _inputs()
    logits, mask = (hidden @ weight.T).reshape(2, 5, 32), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    right = LogitGaps()
    right.wrap_joint(_joint)(logits, targets.reshape(2, 5), temperature=TEMPERATURE, row_mask=mask)
    assert right.logps < 1e-5 and right.entropies < 1e-5
    wrong = LogitGaps()  # the temperature dropped
    unscaled = lambda logits, index, grad, temperature, row_mask: _joint(logits, index, grad, 1.0, row_mask)  # noqa: E731
    wrong.wrap_joint(unscaled)(logits, targets.reshape(2, 5), True, TEMPERATURE, mask)
    assert wrong.logps > 1e-2 and wrong.entropies > 1e-2


def test_the_fused_head_is_held_to_the_head_logits_from_its_hidden_states():
    hidden, weight, bias, targets = _inputs()
    right = LogitGaps()
    out = right.wrap_head(_head)(hidden, weight, bias, targets, TEMPERATURE, 4, None, 1.0, ("log_probs", "entropy"))
    assert right.logps < 1e-5 and right.entropies < 1e-5
    logps, entropies = head_f64(hidden, weight, targets, bias, TEMPERATURE)
    assert torch.allclose(out[0].double(), logps, atol=1e-5) and torch.allclose(out[1].double(), entropies, atol=1e-5)
    wrong = LogitGaps()  # the bias left out of the head
    wrong.wrap_head(lambda h, w, b, *rest: _head(h, w, torch.zeros_like(b), *rest))(
        hidden, weight, bias, targets, TEMPERATURE, 4
    )
    assert wrong.logps > 1e-2 and wrong.entropies > 1e-2
