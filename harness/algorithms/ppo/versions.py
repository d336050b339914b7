"""The PPO contract's version and its history (harness/contract.py): what changed since version 1, and when.

Version 1 is the contract of releases 0.1.0 to 0.3.0. Version 2 (release 0.4.0) holds each optimizer step to the
optimizer's own update (`optimizer_step`). Version 3 (release 0.5.0) also runs gamma, lam, kl_coef and the clip
ranges off their defaults (`settings_sweep[settings=hyperparameters,*]`) and checks the minibatch schedule
(`minibatch_schedule`). Version 4 (release 0.9.0) holds the ranks of verify-dist to random streams of their own
(`sampling[ranks=2]`). Light at import (no torch): `python -m harness --version` reads it.
"""

from __future__ import annotations

from harness.contract import Change, Contract, optimizer_step_change

from .contract import NAMES

OPTIMIZER_STEP = optimizer_step_change(version=2, release="0.4.0")
HYPERPARAMETERS = Change(
    version=3,
    release="0.5.0",
    subject="gamma, lam, kl_coef and the clip ranges off their defaults",
    old="every run at gamma 1, lam 0.95, kl_coef 0.05, cliprange 0.2 and cliprange_value 0.2",
    new="also a run at gamma 0.9, lam 0.8, kl_coef 0.1, cliprange 0.1 and cliprange_value 0.3 (the rollout "
    "objectives, the training signal and the gradient), where a trainer that reads one from a constant is no longer "
    "exact",
    checks=("settings_sweep[[]settings=hyperparameters,*",),
)
MINIBATCH_SCHEDULE = Change(
    version=3,
    release="0.5.0",
    subject="the minibatch schedule",
    old="none: each micro-batch checked against its own rows, whichever they were",
    new="every epoch trains on each rollout row once, in minibatches drawn afresh (not the same in every update)",
    checks=("minibatch_schedule",),
)
RANK_SAMPLING = Change(
    version=4,
    release="0.9.0",
    subject="each rank's own random stream",
    old="no check of what the ranks of verify-dist sampled",
    new="also verify-dist's sampling[ranks=2]: each rank's k-th rollout response against the other's k-th, position "
    "by position, agrees no more than the shifted pairings say independent draws do (Z at most 5)",
    checks=("sampling[[]ranks=*]",),
)

CONTRACT = Contract(
    version=4,
    document="docs/metrics.md",
    changes=(OPTIMIZER_STEP, HYPERPARAMETERS, MINIBATCH_SCHEDULE, RANK_SAMPLING),
    metrics=NAMES,
)
"""PPO's contract: the version a PPO target may pin (`factory.contract_version`)."""
