"""The entropy bonus's judge (scenarios/entropy.py `bonus_gradient`), which entropy_gradient and verify-dist's
entropy_gradient[ranks=N] share: a run it cannot read, or one that cannot tell the window's mean from a mean of
micro-batch means, fails saying so and is never passed."""

from __future__ import annotations

import dataclasses

import torch

from harness.algorithms.grpo.scenarios.entropy import bonus_gradient
from harness.algorithms.grpo.spec import GRPOSpec
from harness.verdict import Check, CheckId
from tests.support.grpo_doubles import record

SPEC = GRPOSpec(entropy_coef=0.01, beta=0.0)


def window(masks, rank: int, logp_grad: bool = True) -> list:
    """One window's micro-batches on `rank`, each with a gradient at its entropies (the window mean's over these
    records alone) and, with `logp_grad`, a zero one at its log-probs."""
    out = []
    for mask in masks:
        base = record(mask, torch.zeros(2, 4).tolist(), [1.0, -1.0])
        grad = -0.01 * torch.tensor(mask, dtype=torch.float64)
        out.append(dataclasses.replace(base, rank=rank, entropy_grad=grad,
                                       logp_grad=torch.zeros(2, 4, dtype=torch.float64) if logp_grad else None))
    return out


def judged(records) -> Check:
    check = Check(CheckId("entropy_gradient", (("ranks", 2),)))
    bonus_gradient(check, records, SPEC, 2, (), "2 ranks")
    return check


def test_a_run_without_the_gradient_at_the_log_probs_fails_as_not_recomputable():
    masks = ([[1, 1, 1, 0], [1, 0, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
    check = judged(window(masks, 0, logp_grad=False) + window(masks, 1, logp_grad=False))
    assert check.failed and check.problems[0].startswith("not recomputable:"), check.problems


def test_windows_of_equal_micro_batches_on_every_rank_fail_as_unable_to_tell_the_means_apart():
    even = ([[1, 1, 0, 0], [1, 1, 1, 0]], [[1, 1, 1, 1], [1, 0, 0, 0]])  # 5 tokens each
    check = judged(window(even, 0) + window(even, 1))
    assert check.failed and not check.metrics, check.problems
    assert check.problems == ["no window whose micro-batches hold unequal token counts: the run cannot tell the "
                              "window's mean entropy from a mean of micro-batch means"]  # fmt: skip
