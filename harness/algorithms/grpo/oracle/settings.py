"""The trainer settings the GRPO oracle's formulas take (`Settings`, a GRPOSpec's with the target's definitions of
the loss), and the log of each token's importance ratio at the asked level (`log_ratios`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import MISSING, dataclass
from typing import Any

import torch

from harness.tolerances import margin_of

from ..definitions import AS_CONFIGURED, IN_THE_SETTINGS, INTERVAL, POSITIVE_ADVANTAGE, TOKEN_MEAN, UPDATE


@dataclass(frozen=True)
class Settings:
    """The trainer settings the oracle's formulas take (a GRPOSpec has them all)."""

    loss_type: str
    beta: float
    use_bias_correction_kl: bool
    epsilon_low: float
    epsilon_high: float
    delta: float | None
    max_completion_length: int
    sapo_temperature_pos: float
    sapo_temperature_neg: float
    vespo_k_pos: float
    vespo_lambda_pos: float
    vespo_k_neg: float
    vespo_lambda_neg: float
    """sapo's and vespo's settings (spec.SOFT_SETTINGS)."""
    dtype: str = "float64"
    importance_sampling_level: str = "token"
    """'token', or 'sequence' (GSPO): every token of a completion takes its completion's ratio, the exp of the mean
    log-ratio over its mask, and the clip flags are one per completion, pooled over completions (section 2)."""
    kl_clamp: float | None = None
    kl_importance_weighting: str = AS_CONFIGURED
    dual_clip_ratio: float | None = None
    policy_loss_includes_kl: bool = True
    metric_pooling: str = INTERVAL
    kl_population: str = TOKEN_MEAN
    entropy_pass: str = UPDATE
    cispo_clip_population: str = POSITIVE_ADVANTAGE
    """The target's definitions of the KL term, the clipped surrogate (definitions.py, IN_THE_LOSS; declared.py), the
    KL term in the pooled policy_loss, how the pooled kl and policy_loss pool an interval's optimizer steps, how
    the pooled kl weighs its tokens (IN_THE_SETTINGS; expect.py), the pass the pooled entropy's entropies come
    from and the tokens cispo's clip flag counts (terms.py); the defaults are the default profile's."""
    top_entropy_quantile: float = 1.0
    """Below 1, each token keeps its policy term only where its entropy is at or above its micro-batch's
    (1 - top_entropy_quantile) quantile (entropy_mask.py); the KL term stays on every token."""
    off_policy_mask_threshold: float | None = None
    """When set, a completion of negative advantage whose mean old_logp - logp over its mask exceeds it loses its
    policy term (off_policy_mask.py); the KL term stays."""

    @classmethod
    def of(cls, spec: Any, definitions: Sequence[tuple[str, Any]] = ()) -> Settings:
        """The settings of `spec`, a field with a default that the spec lacks taking the default, and the entries of
        the loss among `definitions` ((name, value) pairs, as `Target.definitions`) taking their declared value."""
        fields = dataclasses.fields(cls)
        settings = cls(*(getattr(spec, f.name) if f.default is MISSING else getattr(spec, f.name, f.default)
                         for f in fields))  # fmt: skip
        declared = {name: value for name, value in definitions if name in IN_THE_SETTINGS}
        return dataclasses.replace(settings, **declared) if declared else settings

    @property
    def sequence_level(self) -> bool:
        """Whether the ratio is one per completion (importance_sampling_level 'sequence')."""
        return self.importance_sampling_level == "sequence"

    @property
    def margin(self) -> float:
        """CLIP_MARGIN of the trainer's dtype (the float32 one for a dtype the table lacks)."""
        return margin_of(self.dtype)


def log_ratios(logps: torch.Tensor, old: torch.Tensor, mask: torch.Tensor, s: Settings) -> torch.Tensor:
    """(B, T) the log of each token's importance ratio: logp - old_logp, or at sequence level its completion's mean
    of those over the mask on every token (0 for an empty completion, its count clamped to 1, as TRL's)."""
    log_ratio = logps - old
    if not s.sequence_level:
        return log_ratio
    weights = mask.double()
    mean = (log_ratio * weights).sum(dim=1, keepdim=True) / weights.sum(dim=1, keepdim=True).clamp(min=1)
    return mean.expand_as(log_ratio)
