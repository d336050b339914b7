"""The loss of another profile's definitions (definitions.py, IN_THE_LOSS: kl_clamp, kl_importance_weighting,
dual_clip_ratio) than the target declares: a failing `kl`, `policy_loss` or `logp_gradient` whose numbers are that
profile's is named so, as a failing advantage is for advantage_epsilon (formulas.py). gradient_formulas.py and
poolings.py recompute the oracle's formulas with each of these settings; they name a failure, never pass one."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..definitions import IN_THE_LOSS, VOCABULARY
from ..oracle.expect import Settings


def worded(value: Any) -> str:
    """A declared value as the diagnosis says it: a number with :g, anything else as it is."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def other_profiles(s: Settings) -> list[tuple[str, Settings]]:
    """(what differs, in words, the settings) of each profile whose loss entries differ from those `s` declares."""
    out = []
    for profile in VOCABULARY.profiles:
        other = dataclasses.replace(s, **{name: profile.values[name] for name in IN_THE_LOSS})
        differ = [name for name in IN_THE_LOSS if getattr(other, name) != getattr(s, name)]
        if not differ:
            continue
        theirs = ", ".join(f"{name} {worded(getattr(other, name))}" for name in differ)
        ours = ", ".join(f"{name} {worded(getattr(s, name))}" for name in differ)
        out.append((f"{theirs} (the {profile.name} profile's), where the target declares {ours}: declare the "
                    f"definitions its trainer implements", other))  # fmt: skip
    return out
