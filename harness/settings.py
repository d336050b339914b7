"""`verify --set KEY=VALUE`: assignments typed by a spec dataclass's field annotations, shared by every algorithm."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
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


def parse_settings(assignments: list[str], spec_class: type, keys: Sequence[str]) -> dict[str, Any]:
    """`["temperature=0.7"]` -> {"temperature": 0.7} for the settable `keys` of `spec_class`.

    An unknown key, a value of the wrong type, or settings that the spec's own `validate()` rejects
    are a HarnessConfigError listing the keys (a usage error now, not a failure in every check).
    """
    listed = ", ".join(keys)
    out: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or key not in keys:
            raise HarnessConfigError(f"--set {assignment!r}: expected KEY=VALUE with KEY one of {listed}")
        try:
            out[key] = typed(spec_class, key, text.strip())
        except ValueError as exc:
            raise HarnessConfigError(f"--set {assignment!r}: {exc}; keys: {listed}") from None
    spec_class(**out).validate()
    return out
