"""Targets: adapters that build and run a trainer for a scenario.

A target is a callable `factory(spec: ScenarioSpec) -> TargetRun` (see
docs/architecture.md). `resolve("reference")`, `resolve("trl")` or
`resolve("package.module:factory")` returns one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..errors import HarnessConfigError

BUILTIN = {
    "reference": "harness.targets.reference:factory",
    "trl": "harness.targets.trl:factory",
}


def toy_world(spec):
    """The offline toy world both built-in targets train on, from a scenario's seed, sizes, device and dtype."""
    import torch

    from reference_ppo.toy import build_world

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
    )


def resolve(name: str) -> Callable:
    """The factory named by `name`; HarnessConfigError (exit 2) when it cannot be found."""
    path = BUILTIN.get(name, name)
    if ":" not in path:
        known = ", ".join(sorted(BUILTIN))
        raise HarnessConfigError(f"unknown target {name!r}: use one of {known} or 'package.module:factory'")
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HarnessConfigError(f"target {name!r}: cannot import {module_name!r} ({exc})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise HarnessConfigError(f"target {name!r}: {module_name!r} has no callable {attr!r}")
    return factory
