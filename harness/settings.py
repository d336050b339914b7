"""`verify --set KEY=VALUE`: assignments typed by a spec dataclass's field annotations, shared by every algorithm."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from harness.errors import HarnessConfigError


def typed(spec_class: type, key: str, text: str) -> Any:
    """`text` as the type of `spec_class`'s field `key` (ValueError when it is not one)."""
    annotation = {f.name: str(f.type) for f in fields(spec_class)}[key]
    if "None" in annotation and text.lower() in ("none", "null", ""):
        return None
    if annotation.startswith("bool"):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if annotation.startswith("float"):
        return float(text)
    if annotation.startswith("int"):
        return int(text)
    return text


RUN_OPTIONS = ("seed", "device", "dtype")
"""Spec fields the command takes as options of its own, not as `--set`."""


def parse_settings(assignments: list[str], spec_class: type, keys: Sequence[str],
                   refused: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """`["temperature=0.7"]` -> {"temperature": 0.7} for the settable `keys` of `spec_class`.

    An unknown key, a value of the wrong type, or settings that the spec's own `validate()` rejects
    are a HarnessConfigError listing the keys (a usage error now, not a failure in every check); so is a field of the
    spec that each scenario sets itself (a micro-batch size, the accumulation steps, the generation batch: the
    geometry it tests), saying so, one the command takes as an option of its own (`--seed`), and one of `refused`
    (key -> why --set does not take it).
    """
    listed = ", ".join(keys)
    out: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if sep and key in RUN_OPTIONS:
            raise HarnessConfigError(f"--set {assignment!r}: {key} is no trainer setting: the command sets it "
                                     f"(--{key}, where it has the option)")  # fmt: skip
        if sep and key in (refused or {}):
            raise HarnessConfigError(f"--set {assignment!r}: --set does not take {key}: {(refused or {})[key]}")
        if sep and key not in keys and key in {f.name for f in fields(spec_class)}:
            raise HarnessConfigError(f"--set {assignment!r}: every scenario sets {key} itself (the run it makes is "
                                     f"what it tests); --set takes one of {listed}")  # fmt: skip
        if not sep or key not in keys:
            raise HarnessConfigError(f"--set {assignment!r}: expected KEY=VALUE with KEY one of {listed}")
        try:
            out[key] = typed(spec_class, key, text.strip())
        except ValueError as exc:
            raise HarnessConfigError(f"--set {assignment!r}: {exc}; keys: {listed}") from None
    spec_class(**out).validate()
    return out


def applied(spec: Any, settings: Mapping[str, Any], default: Any) -> Any:
    """`spec` with the `--set` `settings`, but for those it sets itself (where it differs from `default`, its
    class's defaults), which stay its own: a run that exists for a setting keeps it, as a swept check does."""
    own = {k for k in settings if getattr(spec, k) != getattr(default, k)}
    return replace(spec, **{k: v for k, v in settings.items() if k not in own})
