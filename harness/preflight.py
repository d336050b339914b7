"""Configuration, validated once before any check runs: the target, its algorithm, the settings, the checks.

`preflight(...)` resolves the target, parses `--set`, checks the asked-for check ids, reads the
baseline file (`--baseline`, harness/baseline.py) against the algorithm's check ids, checks the
device, then builds the target's run for the run-wide spec once (without training it), so
that a target that cannot be imported, built or handed what it needs fails here, in one
line, rather than once per check. The algorithm is the target's own (a factory of yours
declares it, harness/targets/__init__.py), and the built run must fit it: a factory that
reads a field its algorithm's spec lacks, or a run shaped for another algorithm (one with
`loss_inputs` for an algorithm whose checks read the spy's records, or one without them for an
algorithm whose checks read them), is one line naming the `algorithm` to declare. What the
trainer then does wrong while it trains is a failed check (exit 1), never a configuration error.
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
        built(resolved.factory, run_spec, algorithm, target)
    return Configured(resolved, algorithm, run_spec)


def built(factory: Any, run_spec: Any, algorithm: Any = None, target: str = "the target") -> None:
    """Build the target's run for `run_spec`, check it fits `algorithm`, and drop it.

    Only a HarnessConfigError matters here: a factory that reads a field `run_spec` lacks (it builds
    another algorithm's trainer) and a run that does not fit `algorithm` are made one. Anything else
    the build raises is the trainer's to answer for: the checks report it, each naming what it raised.
    """
    from harness.instrument.observe import build_run

    try:
        run = build_run(factory, run_spec)
    except HarnessConfigError:
        raise
    except AttributeError as exc:
        if algorithm is not None and getattr(exc, "obj", None) is run_spec:
            raise HarnessConfigError(spec_misfit(target, algorithm, run_spec, exc.name)) from None
        return  # the trainer's own failure: the checks that build it report it
    except Exception:  # the trainer's own failure: the checks that build it report it
        return
    if algorithm is not None:
        misfit = run_misfit(target, algorithm, run)
        if misfit:
            raise HarnessConfigError(misfit)


def spec_misfit(target: str, algorithm: Any, run_spec: Any, field: str) -> str:
    """Why a factory that read `spec.<field>`, which `algorithm`'s spec lacks, is not a factory of `algorithm`."""
    from harness.algorithms import get, known_algorithms
    from harness.targets import declare_hint

    others = []
    for name in known_algorithms():
        if name != algorithm.name:
            spec = get(name).run_spec(run_spec.seed, run_spec.device, run_spec.dtype)
            if hasattr(spec, field):
                others.append(name)
    return (
        f"target {target!r} is declared {algorithm.name!r}, but its factory reads spec.{field}, which a "
        f"{algorithm.name} spec ({type(run_spec).__name__}) lacks: "
        + (declare_hint(target, *others) if others else f"is it a factory of a {algorithm.name} trainer?")
    )


def run_misfit(target: str, algorithm: Any, run: Any) -> str | None:
    """Why the built `run` does not fit `algorithm` (None when it does).

    What the algorithms' instruments declare (harness/instrument/observe.py `Instruments`): a run of `algorithm`
    has every member its record is made of (`members`), and none that only another algorithm's record is made of.
    """
    from harness.algorithms import get, known_algorithms
    from harness.targets import declare_hint

    mine = algorithm.instruments
    theirs = {name: get(name).instruments for name in known_algorithms() if name != algorithm.name}
    lacking = [member for member in mine.members if not hasattr(run, member)]
    if lacking:
        others = [name for name, other in theirs.items() if lacking[0] not in other.members]
        what = f"has no `{lacking[0]}`, the {mine.reads} {algorithm.name}'s checks read"
    else:
        foreign = [(m, other) for other in theirs.values() for m in other.members if m not in mine.members]
        found = next(((m, other) for m, other in foreign if hasattr(run, m)), None)
        if found is None:
            return None
        others = [name for name, other in theirs.items() if found[0] in other.members]
        what = f"has `{found[0]}`, {found[1].reads}, where {algorithm.name}'s checks read the {mine.reads}"
    fix = declare_hint(target, *others) if others else f"is it a run of a {algorithm.name} trainer?"
    return f"target {target!r} is declared {algorithm.name!r}, but its run ({type(run).__name__}) {what}: {fix}"
