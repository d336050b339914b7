"""The forward recompute: the log-probs and values the trainer used against the network's own, in float64.

Every other check starts from the log-probs and values the trainer computed, so a trainer that
feeds its models the wrong inputs (an attention mask over the pads, position ids off, tokens
replaced, logits at the wrong positions or scaled the wrong way by the temperature) is
consistent with itself and passes them. Here the harness calls the networks themselves: the
float64 CPU copies `observe()` took of the run's `models` before training, with its own
attention mask (every token but pad) and position ids (the count of real tokens before each),
on the row's real tokens (docs/metrics.md, "The update"):

- the response is what the trainer handed `selective_log_softmax` as `index`;
- the query is one of the run's `prompts`: the one under which the policy's log-probs of that
  response match the trainer's rollout log-probs (the prompts are not trusted to the trainer's
  inputs, which the bugs above mangle; two prompts that both match give the same numbers);
- logits_t is the network's output at the position before response token t, over the spec's
  temperature; logp_t = log_softmax(logits_t)[y_t]; v_t is the value model's scalar head there.

At learning rate 0 the weights never move, so the copies taken before training are the
networks of every forward pass of the run: the rollout's log-probs, the reference's, each
micro-batch's new log-probs and the value head's outputs (old and new) must all equal them
on V: the positions the update uses (R), and the one after the last real token, whose context
is all real tokens too (so that a response that starts with pad still names its prompt).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from harness.checks.forward import Gaps, match_prompts, networks_of, response_logprobs, response_values
from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.observe import ObservationCache
from harness.require import require
from harness.scenario import Case, Scenario
from harness.tolerances import tolerance
from harness.verdict import Check, CheckResult

from ..oracle.values import micro_batch_values, rollout_values
from ..runs import FORWARD_RUNS, spec_for
from ..spec import ScenarioSpec
from ..tolerances import TOLERANCES
from ..view import UpdateView
from .preconditions import require_view

NETWORKS = ("policy", "ref_policy", "value_model")


def compare_update(update: UpdateView, networks: Mapping, prompts: torch.Tensor, pad: int, temperature: float,
                   gaps: Gaps, check: Check, tol: float) -> torch.Tensor | None:  # fmt: skip
    """One update's log-probs and values against the networks'; returns the prompts matched to rows (indices)."""
    where = f"update {update.index + 1}"
    rollout = update.rollout
    if rollout is None:
        check.fail(f"{where}: not recomputable: {update.rollout_problem}")
        return None
    responses, v_mask = rollout.responses, rollout.value_mask
    every = list(range(rollout.samples))
    chosen, nearest = match_prompts(networks["policy"], prompts, responses, rollout.logprobs, v_mask, pad, temperature)
    for row in (nearest > tol).nonzero().flatten().tolist():
        check.fail(f"{where} rollout row {row}: no prompt of the run's {len(prompts)} gives the policy network's "
                   f"log-probs of the sampled response; the nearest is off by {float(nearest[row]):.3g} "
                   f"(tolerance {tol:.3g})")  # fmt: skip
    queries, known = prompts[chosen], (nearest <= tol).unsqueeze(1)  # rows no prompt explains: query unknown
    policy = response_logprobs(networks["policy"], queries, responses, pad, temperature)
    gaps.add("policy, rollout", (policy - rollout.logprobs).abs(), v_mask, where, every)
    if rollout.ref_logprobs is None:
        check.fail(f"{where}: reference log-probs not recomputable: {rollout.ref_problem}")
    else:
        ref = response_logprobs(networks["ref_policy"], queries, responses, pad, temperature)
        gaps.add("reference, rollout", (ref - rollout.ref_logprobs).abs(), v_mask & known, where, every)
    for micro in update.micro_batches:
        if micro.rollout_rows is None:
            check.fail(f"{micro.where}: new log-probs not recomputable: {micro.old_problem}")
            continue
        rows = micro.rollout_rows.tolist()
        gap = (policy[micro.rollout_rows] - micro.record.logprobs).abs()
        mask = micro.value_mask & known[micro.rollout_rows]
        gaps.add("policy, new", gap, mask, f"{where} micro-batch {micro.where.split()[-1]}", rows)
    try:
        values = response_values(networks["value_model"], queries, responses, pad)
        old = rollout_values(update)
        gaps.add("value, rollout", (values - old).abs(), v_mask & known, where, every)
        for micro, new in zip(update.micro_batches, micro_batch_values(update)):
            if micro.rollout_rows is not None:
                rows = micro.rollout_rows.tolist()
                gap = (values[micro.rollout_rows] - new).abs()
                mask = micro.value_mask & known[micro.rollout_rows]
                gaps.add("value, new", gap, mask, f"{where} micro-batch {micro.where.split()[-1]}", rows)
    except NotRecomputable as why:
        check.fail(f"{where}: values not recomputable: {why}")
    return chosen[known.squeeze(1)]


QUANTITIES = {
    "policy, rollout": "forward/logprob",
    "reference, rollout": "forward/logprob",
    "policy, new": "forward/logprob",
    "value, rollout": "forward/value",
    "value, new": "forward/value",
}
"""What is compared, and the tolerance row of harness/tolerances.py it is held to."""


def forward_recompute(cache: ObservationCache, run: ScenarioSpec, case: Case) -> CheckResult:
    """At LR 0, the log-probs (rollout, reference, each micro-batch's) and the values the trainer used equal the
    networks' own, recomputed in float64 with the harness's attention mask and position ids on the real tokens."""
    check = Check(case.id)
    obs = cache.get(spec_for(FORWARD_RUNS[case.param("run", "lr0_uneven")], run))
    view = require_view(obs, check)
    if view is None or not require(check, obs.spec.learning_rate == 0, "the run's learning rate is not 0"):
        return check.finish()
    try:
        networks, prompts = networks_of(obs.ran, NETWORKS, "log-probs and values")
    except NotRecomputable as why:
        check.fail(f"not recomputable: {why}")
        return check.finish()
    spec, pad, gaps = obs.spec, obs.ran.pad_token_id, Gaps()
    tol = tolerance("forward/logprob", spec.dtype, TOLERANCES).abs_tol
    padded = False
    for update in view.updates:
        chosen = compare_update(update, networks, prompts, pad, spec.temperature, gaps, check, tol)
        if chosen is not None:
            padded = padded or bool((prompts[chosen] == pad).any())
    if spec.prompt_pads:
        require(check, padded, "no rollout row was matched to a left-padded prompt")
    for quantity, metric in QUANTITIES.items():
        if quantity not in gaps.largest:
            if not check.failed:  # rows no prompt explains are failed above, by name
                check.fail(f"{quantity}: no position was compared")
            continue
        gap, where = gaps.largest[quantity]
        check.absorb(compare({metric: gap}, {metric: 0.0}, spec.dtype, TOLERANCES, kind="network",
                             where=f"{quantity}: {where}"))  # fmt: skip
    return check.finish()


FORWARD_SCENARIOS = (
    Scenario(
        "forward_recompute",
        forward_recompute,
        (("run", tuple(FORWARD_RUNS)),),
        "LR 0: rollout, reference and new log-probs and the values == the networks' own, float64, on the real tokens",
    ),  # fmt: skip
)
