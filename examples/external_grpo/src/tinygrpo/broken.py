"""A deliberately broken tinygrpo, to show the gate failing it: `ppo-verify --target tinygrpo.broken:factory`.

It logs each token mean as the flat mean of the passes' own means (TRL 1.12.0's pooling, class 16 of
the harness's bug catalogue): a pass of two short completions weighs as much as one of four long
ones, and a pass with no token pulls the mean towards 0. The gate must exit 1.
"""

from __future__ import annotations

import torch

from tinygrpo import target, trainer

TOKENS = trainer.TALLY.index("tokens")
MEANS = [trainer.TALLY.index(name) for name in (*trainer.TOKEN_MEANS, "loss_tokens")]


class MeanOfPassMeans(trainer.TinyGRPO):
    """TinyGRPO whose token means are means of per-pass means."""

    def pool(self, tallies: torch.Tensor) -> dict[str, float]:
        means = tallies.clone()
        means[:, MEANS] = tallies[:, MEANS] / tallies[:, [TOKENS]].clamp(min=1)
        means[:, TOKENS] = 1.0  # every pass counts once
        return super().pool(means)


def factory(spec):
    return target.build(spec, trainer_class=MeanOfPassMeans)


factory.algorithm = "grpo"
# the same trainer but for its pooling: what it declares it cannot run, and the contract it was written for, are
# tinygrpo's (without them the gate would also fail it for the options tinygrpo does not have)
factory.not_applicable = target.factory.not_applicable
factory.contract_version = target.factory.contract_version
