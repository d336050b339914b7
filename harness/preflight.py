"""Configuration, validated once before any check runs: the target, its algorithm, the settings, the checks.

`preflight(...)` resolves the target, parses `--set`, checks the asked-for check ids, reads the
baseline file (`--baseline`, harness/baseline.py) against the algorithm's check ids, checks the
device, then builds the target's run for the run-wide spec once (without training it), so
that a target that cannot be imported, built or handed what it needs fails here, in one
line, rather than once per check. What the trainer then does wrong while it trains is a
failed check (exit 1), never a configuration error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessConfigError


@dataclass(frozen=True)
class Configured:
    """What a gate run is made of, once validated."""

    target: Any
    """The resolved `harness.targets.Target`."""
    algorithm: Any
    """Its `harness.algorithms.Algorithm`."""
    run_spec: Any
    """The run-wide spec every scenario spec derives from."""


def preflight(
    target: str,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    settings: list[str] | tuple[str, ...] = (),
    checks: list[str] | tuple[str, ...] = (),
    build: bool = True,
    baseline: str | None = None,
) -> Configured:
    """The validated configuration of a gate run; HarnessConfigError (one line) for the first thing wrong."""
    from harness.algorithms import cases, get
    from harness.targets import resolve

    resolved = resolve(target)
    algorithm = get(resolved.algorithm)
    typed = algorithm.parse_settings(list(settings))
    known = {str(c.id) for c in cases(algorithm.name)}
    unknown = sorted(set(checks) - known)
    if unknown:
        raise HarnessConfigError(
            f"unknown check id(s) {', '.join(unknown)} for {algorithm.name}; `python -m harness checks --target "
            f"{target}` lists them"
        )
    if baseline is not None:
        from harness.baseline import load

        load(baseline, algorithm.name, target)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise HarnessConfigError(f"--device {device} but torch {torch.__version__} sees no CUDA device")
    run_spec = algorithm.run_spec(seed, device, dtype, typed)
    if build:
        built(resolved.factory, run_spec)
    return Configured(resolved, algorithm, run_spec)


def built(factory: Any, run_spec: Any) -> None:
    """Build the target's run for `run_spec` and drop it: only a HarnessConfigError matters here.

    Anything else the build raises is the trainer's to answer for: the checks report it, each
    naming what it raised.
    """
    from harness.instrument.observe import build_run

    try:
        build_run(factory, run_spec)
    except HarnessConfigError:
        raise
    except Exception:  # the trainer's own failure: the checks that build it report it
        return
