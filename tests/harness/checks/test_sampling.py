"""`sampling`: the drawn tokens against the distribution the rollout's log-probs describe."""

from __future__ import annotations

import torch

from harness.algorithms.ppo.view import RolloutView
from harness.checks.sampling import drawn_positions, judge_sampling, sampling_z
from harness.instrument.tensors import reduce_logits
from harness.report.format import check_failure_lines
from harness.verdict import Check, CheckId

PAD, STOP = 0, 3


def test_drawn_positions_are_r_and_a_pad_drawn_after_the_last_real_token():
    responses = torch.tensor(
        [
            [5, 6, 3, 0, 0],  # ended by the stop token: the pads after it were not drawn
            [5, 6, 0, 7, 7],  # a pad drawn at 2 ended it: counted; what came after is not
            [0, 0, 0, 0, 0],  # a pad drawn first: an empty response, its one drawn token counted
            [5, 6, 7, 8, 9],  # no end within the width
            [3, 5, 5, 5, 5],  # stop first: only the stop token (a sampler that went on is not judged)
        ]
    )
    want = torch.tensor(
        [
            [1, 1, 1, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 0, 0, 0, 0],
            [1, 1, 1, 1, 1],
            [1, 0, 0, 0, 0],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(drawn_positions(responses, STOP, PAD), want)
    assert drawn_positions(responses, None, PAD)[0].tolist() == [True, True, True, True, False]


def test_the_spy_s_variance_is_that_of_the_log_prob_under_the_distribution():
    logits = torch.randn(3, 4, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    logits[0, 0, 5] = float("-inf")
    _, _, spread = reduce_logits(logits)
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    finite = torch.where(p > 0, logp, torch.zeros_like(logp))
    want = (p * finite**2).sum(-1) - (p * finite).sum(-1) ** 2
    assert torch.allclose(spread, want, atol=1e-12)


def _rollout(logits: torch.Tensor, tokens: torch.Tensor) -> RolloutView:
    logp = torch.log_softmax(logits, dim=-1)
    entropy, _, spread = reduce_logits(logits)
    picked = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    return RolloutView(tokens, picked, entropy, mask, mask, None, None, None, spread)


def test_draws_from_the_described_distribution_pass_and_greedy_or_colder_draws_fail():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(40, 12, 16, dtype=torch.float64, generator=gen) * 1.5 + 4.0  # no pad, no stop drawn
    drawn = torch.multinomial(torch.softmax(logits, -1).reshape(-1, 16), 1, generator=gen).reshape(40, 12)
    z, tokens = sampling_z([_rollout(logits, drawn)], None, pad=99)
    assert tokens == 480 and abs(z) < 3
    greedy = logits.argmax(-1)
    assert sampling_z([_rollout(logits, greedy)], None, pad=99)[0] < -10
    colder = torch.multinomial(torch.softmax(logits / 0.7, -1).reshape(-1, 16), 1, generator=gen).reshape(40, 12)
    assert sampling_z([_rollout(logits, colder)], None, pad=99)[0] < -5
    check = Check(CheckId("sampling"))
    judge_sampling([_rollout(logits, greedy)], None, 99, check, "uneven split")
    assert check.failed and "more probable" in check_failure_lines(check.finish())[0]


def test_it_fails_when_it_saw_no_drawn_token_or_no_variance():
    logits = torch.zeros(2, 3, 5, dtype=torch.float64)
    empty = _rollout(logits, torch.zeros(2, 3, dtype=torch.long))
    empty = RolloutView(empty.responses, empty.logprobs, empty.entropy, empty.response_mask, empty.value_mask,
                        None, None, None, empty.logprob_variance)  # fmt: skip
    check = Check(CheckId("sampling"))
    judge_sampling([empty], STOP, 0, check, "x")  # every response a pad drawn first: 2 tokens, variance 0
    assert check.failed
    blind = RolloutView(empty.responses, empty.logprobs, empty.entropy, empty.response_mask, empty.value_mask,
                        None, None, None, None)  # fmt: skip
    check = Check(CheckId("sampling"))
    judge_sampling([blind], STOP, 0, check, "x")
    assert check.failed and "no log-prob variance" in check_failure_lines(check.finish())[0]
