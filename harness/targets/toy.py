"""The offline toy world the built-in targets train on (tiny models from a config, a local tokenizer)."""

from __future__ import annotations

from harness.errors import HarnessConfigError


def toy_world(spec, prompt_pads: int = 0):
    """The toy world of a scenario's seed, sizes, device, dtype and dropout (HarnessConfigError if it lacks them),
    its prompts left-padded by up to `prompt_pads` pads."""
    import torch

    from reference_trainers.toy import build_world

    if spec.device.startswith("cuda") and not torch.cuda.is_available():
        raise HarnessConfigError(f"device {spec.device!r} asked for but CUDA is not available")
    if spec.device != "cpu" and not spec.device.startswith("cuda"):
        raise HarnessConfigError(f"the built-in targets run on 'cpu' or 'cuda', not {spec.device!r}")
    dtype = getattr(torch, spec.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise HarnessConfigError(f"unknown dtype {spec.dtype!r} in scenario")
    return build_world(
        seed=spec.seed,
        vocab_size=spec.vocab_size,
        prompt_length=spec.prompt_length,
        num_prompts=spec.num_prompts,
        device=spec.device,
        dtype=dtype,
        independent_ref=True,
        pad_logit_bias=spec.pad_logit_bias,
        prompt_pads=prompt_pads,
        dropout=spec.dropout,
        stop_logit_bias=getattr(spec, "stop_logit_bias", 0.0),
    )
