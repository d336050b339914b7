"""The runs the PPO scenarios are made of: the uneven split and its variants, as plain `ScenarioSpec`s."""

from __future__ import annotations

from .spec import SETTINGS, ScenarioSpec

# The uneven split: micro-batches of 4 and 2 rows, a learning rate that moves the policy.
UNEVEN = ScenarioSpec(name="uneven_split", learning_rate=1e-3, total_updates=2)
EVEN = UNEVEN.with_(name="even_split", per_device_train_batch_size=6, gradient_accumulation_steps=2, total_updates=1)
LR0 = UNEVEN.with_(name="lr0_ratio", learning_rate=0.0, total_updates=1)
GRADIENT_CUTS = ((4, 3), (2, 6), (6, 2), (3, 4))
"""Cuts of the same minibatches of 6 rows into micro-batches: 4+2, 2+2+2, 6, 3+3."""
ALL_MASKED = UNEVEN.with_(
    name="all_masked",
    per_device_train_batch_size=1,
    gradient_accumulation_steps=12,
    pad_logit_bias=2.5,
    total_updates=1,
)
EMPTY_UPDATE = UNEVEN.with_(name="empty_update", pad_logit_bias=40.0, total_updates=1)
PADDING_ROWS = UNEVEN.with_(name="padding_rows", rollout_chunk=5, total_updates=3)
LEFT_PADDED = LR0.with_(name="left_padded", prompt_pads=3)
FORWARD_RUNS = {"lr0_uneven": LR0.with_(name="gradient_partition"), "left_padded": LEFT_PADDED}
"""The LR-0 runs the forward recompute reads: the uneven split at LR 0 (gradient_partition's first cut, so
the run is shared), and the same with prompts left-padded by 0 to 3 pad tokens."""
ROLLOUTS = {"uneven_split": UNEVEN, "padding_rows": PADDING_ROWS}
"""The runs whose rollout objectives are checked: the uneven split, and a rollout cut into chunks of 5 over three
updates (the gate's one run of more than two: the third shows an update counter that stops counting)."""


def spec_for(base: ScenarioSpec, run: ScenarioSpec) -> ScenarioSpec:
    """`base` with the run-wide settings of `run`: seed, device, dtype, and every trainer setting. Left padding of
    the prompts is the larger of the two: a run that needs it (left_padded) keeps it, and a settings profile that
    asks for it (the reward on text) adds it to every run of its checks."""
    settings = {k: getattr(run, k) for k in SETTINGS}
    pads = max(base.prompt_pads, run.prompt_pads)
    return base.with_(seed=run.seed, device=run.device, dtype=run.dtype, prompt_pads=pads, **settings)
