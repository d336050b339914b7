"""A deliberately broken tinyppo, to show the gate failing it: `ppo-verify --target tinyppo.broken:factory`.

It pools each statistic as the mean of the per-pass means (bug class 1 of the harness's bug
catalogue): a pass of 2 short responses weighs as much as one of 4 long ones, so the logged
numbers change with the cut. The gate must exit 1.
"""

from __future__ import annotations

import torch

from tinyppo import target, trainer

COUNTS = (trainer.TALLY.index("tokens/response"), trainer.TALLY.index("tokens/value"))


class MeanOfPassMeans(trainer.TinyPPO):
    """TinyPPO whose statistics are means of per-pass means."""

    def summarize(self, tallies: torch.Tensor) -> dict[str, float]:
        means = tallies.clone()
        for i, name in enumerate(trainer.ON_RESPONSE + trainer.ON_VALUE):
            count = tallies[:, COUNTS[0] if name in trainer.ON_RESPONSE else COUNTS[1]]
            means[:, i] = tallies[:, i] / count.clamp(min=1)
        means[:, list(COUNTS)] = 1.0
        return super().summarize(means)


def factory(spec):
    return target.build(spec, trainer_class=MeanOfPassMeans)


factory.algorithm = "ppo"
factory.contract_version = target.factory.contract_version  # the same trainer but for its pooling: tinyppo's
