"""The loss of another profile's definitions (definitions.py, IN_THE_LOSS: kl_clamp, kl_importance_weighting,
dual_clip_ratio; token_mean_scope for the gradient of the token-mean loss types; policy_loss_includes_kl for the pooled
policy_loss; metric_pooling for the pooled kl and policy_loss) than the target declares: a failing `kl`, `policy_loss`
or `logp_gradient` whose numbers are that profile's is named so, as a failing advantage is for advantage_epsilon
(formulas.py). gradient_formulas.py and poolings.py recompute the oracle's formulas with each of these settings; they
name a failure, never pass one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..definitions import IN_THE_LOSS, VOCABULARY
from ..oracle.expect import Settings


def worded(value: Any) -> str:
    """A declared value as the diagnosis says it: a number with :g, anything else as it is."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def other_values(ours: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what differs, in words, the profile's values of `ours`' entries) of each profile whose values of those
    entries differ from `ours` (the values the target declares)."""
    out = []
    for profile in VOCABULARY.profiles:
        theirs = {name: profile.values[name] for name in ours}
        differ = [name for name in ours if theirs[name] != ours[name]]
        if not differ:
            continue
        said = ", ".join(f"{name} {worded(theirs[name])}" for name in differ)
        declared = ", ".join(f"{name} {worded(ours[name])}" for name in differ)
        out.append((f"{said} (the {profile.name} profile's), where the target declares {declared}: declare the "
                    f"definitions its trainer implements", theirs))  # fmt: skip
    return out


def other_profiles(s: Settings, names: Sequence[str] = IN_THE_LOSS) -> list[tuple[str, Settings]]:
    """(what differs, in words, the settings) of each profile whose entries `names` (the loss's, by default) differ
    from those `s` declares."""
    ours = {name: getattr(s, name) for name in names}
    return [(words, dataclasses.replace(s, **theirs)) for words, theirs in other_values(ours)]
