"""GRPO's forward recompute and sampling check: the log-probs the loss used, and the tokens the rollout drew,
against float64 copies of the run's own networks (`logit_recompute`, the log-probs against the loss's own logits,
is logits.py's).

Every other GRPO check starts from the log-probs the trainer computed, so a trainer that feeds its
networks the wrong inputs (logits at the wrong positions, not shifted by one; an attention mask over
the pads; logits scaled the wrong way by the temperature) is consistent with itself: its old,
reference and update log-probs all take the same wrong slice, and every ratio, KL and gradient
agrees. Here the harness calls the networks themselves (harness/checks/forward.py): the float64 CPU
copies `observe()` took of the run's `models` ("policy", and "ref_policy" when beta is not 0) before
training, with its own attention mask (every token but pad) and position ids, on each row's
completion ids. The prompt of a row is one of the run's `prompts`: the one under which the policy's
log-probs of the completion match the trainer's (`match_prompts`), so the prompts are not taken from
the trainer's inputs. The completions of one group (num_generations consecutive completions of a
generation batch, whose advantages are normalised together) must all be explained by one prompt.

The run is at learning rate 0, two passes over each generation (so the trainer keeps old log-probs)
at temperature 0.5 unless the run sets another: the weights never move, so the copies are the
networks of every forward pass, and on every loss record

    logps, old_logps                  == log softmax(policy logits / temperature)[y]
    ref_logps                         == log softmax(reference logits / temperature)[y]
    entropies                         == H(softmax(policy logits / temperature))

at the positions compared: the record's mask, up to the completion's first pad or stop token (the
positions whose context is all real tokens; a trainer that attends to a pad drawn mid-completion is
not judged there, since the contract does not say how a pad in the middle is attended to).

Every other GRPO run's prompts are all of one length (prompt_length real tokens), where a trainer that attends
to a prompt's pads, counts positions from a padded start or reads a completion's logits at an offset taken from
the real tokens computes the same numbers as a right one. `forward_recompute[prompt_pads=3]` runs the same
geometry with prompt i left-padded by i % 4 pads (prompts of 6, 5, 4 and 3 real tokens), each target's trainer
padding them as it does (the reference is handed them padded; TRL is handed their real tokens and pads them
itself), and holds every row to the networks on the padded prompt that explains it. The run must hold a compared
row explained by a padded prompt, or it fails: a target that ignores `prompt_pads` shows nothing. The toy
policy's rotary positions are relative, so position ids counted from the padded start (a constant shift of a
row's positions) give the same logits to rounding: what the point shows is the attention to the pads and the
offset of the completion's logits.

`sampling` reads the same run: each completion's drawn tokens (every position up to and including
its first stop token or pad) against the distribution the policy network gives there, with the Z
statistic of harness/checks/sampling.py. A trainer that samples greedily, at another temperature than
it scores at, or from a filtered distribution fails it; one whose log-probs alone are wrong does not
(the networks, not its log-probs, describe the distribution here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from harness.checks.forward import Gaps, match_prompts, networks_of, response_distribution, response_logprobs
from harness.checks.sampling import drawn_positions, judge_sampling
from harness.compare import compare
from harness.errors import NotRecomputable
from harness.instrument.loss import LossRecord
from harness.instrument.observe import Observation, ObservationCache
from harness.require import require
from harness.scenario import Case, Scenario
from harness.tolerances import tolerance
from harness.verdict import Check, CheckResult

from ..instruments import recorded
from ..runs import LR0, spec_for
from ..spec import GRPOSpec
from ..tolerances import TOLERANCES
from .logits import logit_recompute
from .preconditions import require_records

FORWARD = LR0.with_(name="forward_recompute", num_iterations=2, temperature=0.5)
"""Two generations of 8 completions, each trained twice in windows of two micro-batches of 4, at LR 0. At
temperature 0.5: the toy policy's logits are small, and at 0.7 a trainer that samples at temperature 1 (its
temperature not handed to the sampler) gave |Z| 3.9 and 3.0 at seeds 0 and 1, under the bound; at 0.5 it fails."""
QUANTITIES = {
    "policy, loss": ("logps", "forward/logprob"),
    "policy, old": ("old_logps", "forward/logprob"),
    "reference": ("ref_logps", "forward/logprob"),
    "entropy": ("entropies", "forward/entropy"),
}
"""What is compared: the record field, and the tolerance row (harness/tolerances.py) it is held to."""
SHOWN = 3
"""Rows named one by one when no prompt explains them; the rest are counted."""


PROMPT_PADS = 3
"""prompt_pads of the padded point: prompt i starts with i % 4 pads, so the run's prompts have 6, 5, 4 or 3 real
tokens, three in four of them padded (at seed 0, 6 of the reference's 14 compared rows, 16 of TRL's 32)."""


def forward_spec(run: GRPOSpec, pads: int = 0) -> GRPOSpec:
    """The forward run under the run-wide settings, its prompts left-padded by up to `pads` pads, at temperature
    0.5 unless the run sets another."""
    spec = spec_for(FORWARD, run).with_(prompt_pads=pads)
    spec = spec.with_(name="forward_left_padded") if pads else spec
    return spec.with_(temperature=FORWARD.temperature) if run.temperature == GRPOSpec().temperature else spec


@dataclass(frozen=True)
class RowForward:
    """What the networks give for the rows of one loss record, and which rows a prompt explains."""

    record: LossRecord
    compared: torch.Tensor
    """(B, T) bool: the positions compared (module docstring)."""
    known: torch.Tensor
    """(B,) bool: rows some prompt of the run explains."""
    prompt: torch.Tensor
    """(B,) int64: the prompt (index into the run's `prompts`) that explains each row."""
    network: Mapping[str, torch.Tensor]
    """Field name (`QUANTITIES`) -> (B, T) float64, the networks' value there; plus "variance" for `sampling`."""


def networks_forward(obs: Observation) -> tuple[tuple[RowForward, ...] | None, tuple[str, ...]]:
    """The networks' log-probs and entropies for every loss record of the run (None when they cannot be had), and
    the problems found on the way (what the checks that read them fail with)."""
    records = recorded(obs.ran).loss_inputs
    spec, pad, stop = obs.spec, obs.ran.pad_token_id, obs.ran.stop_token_id
    names = ("policy", "ref_policy") if spec.beta else ("policy",)
    try:
        networks, prompts = networks_of(obs.ran, names)
    except NotRecomputable as why:
        return None, (f"not recomputable: {why}",)
    lacking = next((k for k, r in enumerate(records) if r.completion_ids is None or r.logps is None), None)
    if lacking is not None:
        return None, (f"not recomputable: loss record {lacking + 1} keeps no `completion_ids` or no `logps`",)
    tol = tolerance("forward/logprob", spec.dtype, TOLERANCES).abs_tol
    out, unexplained = [], []
    for k, record in enumerate(records):
        ids = torch.as_tensor(record.completion_ids).long()
        compared = drawn_positions(ids, stop, pad) & record.completion_mask.bool()
        chosen, nearest = match_prompts(networks["policy"], prompts, ids, record.logps, compared, pad,
                                        spec.temperature)  # fmt: skip
        known = nearest <= tol
        unexplained += [(k, row, float(nearest[row])) for row in (~known).nonzero().flatten().tolist()]
        logp, entropy, variance = response_distribution(networks["policy"], prompts[chosen], ids, pad,
                                                        spec.temperature)  # fmt: skip
        network = {"logps": logp, "old_logps": logp, "entropies": entropy, "variance": variance}
        if "ref_policy" in networks:
            network["ref_logps"] = response_distribution(networks["ref_policy"], prompts[chosen], ids, pad,
                                                         spec.temperature)[0]  # fmt: skip
        out.append(RowForward(record, compared, known, chosen, network))
    problems = []
    for k, row, gap in unexplained[:SHOWN]:
        problems.append(f"loss record {k + 1} row {row + 1}: no prompt of the run's {len(prompts)} gives the policy "
                   f"network's log-probs of the completion; the nearest is off by {gap:.3g} "
                   f"(tolerance {tol:.3g})")  # fmt: skip
    if len(unexplained) > SHOWN:
        total = sum(int(f.compared.any(dim=1).sum()) for f in out)
        problems.append(f"... and {len(unexplained) - SHOWN} more: {len(unexplained)} of {total} rows with a compared "
                   f"position match no prompt (log-probs at other positions, or of other logits, than the "
                   f"network's)")  # fmt: skip
    return tuple(out), tuple(problems)


def forward_rows(cache: ObservationCache, run: GRPOSpec, check: Check,
                 pads: int = 0) -> tuple[Observation, tuple | None]:  # fmt: skip
    """The forward run (its prompts padded by up to `pads`) and its rows (computed once, however many checks read
    them), after failing `check` with what is wrong; None for the rows when there is nothing to compare."""
    obs = cache.get(forward_spec(run, pads), spy=False)
    if require_records(obs, check) is None or not require(check, obs.spec.learning_rate == 0, "the run's "
                                                          "learning rate is not 0"):  # fmt: skip
        return obs, None
    rows, problems = obs.view("grpo/forward", lambda ran: networks_forward(obs))
    for problem in problems:
        check.fail(problem)
    return obs, rows


def forward_recompute(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """At LR 0, every loss record's log-probs (the loss's, the old and the reference's) and entropies equal the
    networks' own, recomputed in float64 with the harness's attention mask and positions."""
    check = Check(case.id)
    pads = int(case.param("prompt_pads", 0))
    obs, rows = forward_rows(cache, run, check, pads)
    if rows is None:
        return check.finish()
    if pads:
        padded_rows(obs, rows, check)
    gaps = Gaps()
    for k, row in enumerate(rows):
        places = _places(row.record)
        for quantity, (name, _) in QUANTITIES.items():
            used, network = getattr(row.record, name), row.network.get(name)
            if used is None or network is None:
                continue
            gap = (network - torch.as_tensor(used).double()).abs()
            gaps.add(quantity, gap, row.compared & row.known.unsqueeze(1), f"loss record {k + 1}", places)
    policy, prompts = obs.ran.networks["policy"], obs.ran.prompts
    tol = tolerance("forward/logprob", obs.spec.dtype, TOLERANCES).abs_tol

    def explains(row: RowForward, j: int, prompt: int) -> bool:
        ids = torch.as_tensor(row.record.completion_ids[j : j + 1]).long()
        logp = response_logprobs(policy, prompts[prompt : prompt + 1], ids, obs.ran.pad_token_id, obs.spec.temperature)
        gap = (logp - torch.as_tensor(row.record.logps[j : j + 1]).double()).abs()
        return bool((gap[row.compared[j : j + 1]] <= tol).all())

    for problem in group_problems(rows, obs.spec.num_generations, explains)[:SHOWN]:
        check.fail(problem)
    if obs.spec.beta and not any(r.record.ref_logps is not None for r in rows):
        check.fail(f"beta={obs.spec.beta}, and no loss record keeps the reference's log-probs (`ref_logps`)")
    for quantity, (name, row_name) in QUANTITIES.items():
        if quantity in gaps.largest:
            gap, where = gaps.largest[quantity]
            check.absorb(compare({row_name: gap}, {row_name: 0.0}, obs.spec.dtype, TOLERANCES, kind="network",
                                 where=f"{quantity}: {where}"))  # fmt: skip
        elif quantity == "policy, loss" and not check.failed:
            check.fail("no position was compared (no row with a masked position some prompt explains)")
        elif quantity != "policy, loss" and not check.failed:
            check.note(f"{quantity}: the trainer kept none (`{name}`): not compared")
    return check.finish()


def padded_rows(obs: Observation, rows: Sequence[RowForward], check: Check) -> None:
    """Fail `check` unless some compared row is explained by a left-padded prompt (the padded point's reason to
    be); note how many are."""
    prompts, pad = torch.as_tensor(obs.ran.prompts), obs.ran.pad_token_id
    if not bool((prompts == pad).any()):
        check.fail(f"prompt_pads={obs.spec.prompt_pads}, and none of the run's {len(prompts)} prompts holds a pad: "
                   f"the target does not honour prompt_pads (or declares the point not applicable)")  # fmt: skip
        return
    padded = total = 0
    for row in rows:
        shown = row.known & row.compared.any(dim=1)
        total += int(shown.sum())
        padded += int((prompts[row.prompt[shown]] == pad).any(dim=1).sum())
    if require(check, padded, f"prompt_pads={obs.spec.prompt_pads}, and none of the {total} compared rows is "
                              f"explained by a left-padded prompt: nothing of the padding was compared"):  # fmt: skip
        check.note(f"{padded} of {total} compared rows (each pass's) explained by a left-padded prompt")


def group_problems(rows: Sequence[RowForward], group_size: int, explains) -> list[str]:
    """Groups whose completions were sampled from different prompts: the advantages' groups are num_generations
    consecutive completions of a generation batch (docs/grpo-metrics.md, "Advantages"), each of one prompt.
    `explains(row, j, prompt)` says whether a prompt gives row j's log-probs too: where the tolerance is wide
    (bfloat16) several prompts may, and a group whose first completion's prompt explains them all is one prompt's."""
    members: dict[tuple[int, int, int], list[tuple[int, RowForward, int]]] = {}
    for row in rows:
        record = row.record
        for j, place in enumerate(_places(record)):
            if bool(row.known[j]) and bool(row.compared[j].any()):
                key = (int(record.generation), int(record.rank), place // group_size)
                members.setdefault(key, []).append((place, row, j))
    out = []
    for (generation, rank, group), seen in sorted(members.items()):
        first = int(seen[0][1].prompt[seen[0][2]])
        strays = sorted(
            {place for place, row, j in seen if int(row.prompt[j]) != first and not explains(row, j, first)}
        )
        if strays:
            on = f" on rank {rank}" if rank else ""
            chosen = sorted({int(row.prompt[j]) for _, row, j in seen})
            out.append(f"generation {generation}{on}, group {group}: completions {strays} are not explained by prompt "
                       f"{first} of the run's, which explains completion {seen[0][0]} (prompts {chosen}); a group is "
                       f"num_generations={group_size} consecutive completions of one prompt")  # fmt: skip
    return out


@dataclass(frozen=True)
class Drawn:
    """One generation's completions as `judge_sampling` reads them (harness/checks/sampling.py's DrawnRollout)."""

    responses: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    logprob_variance: torch.Tensor


def drawn_generations(rows: Sequence[RowForward]) -> list[Drawn]:
    """Each generation's completions, each once, with the policy network's log-probs, entropy and variance."""
    seen: dict[tuple[int, int], dict[int, tuple]] = {}
    for row in rows:
        record = row.record
        key = (int(record.generation), int(record.rank))
        for j, place in enumerate(_places(record)):
            if bool(row.known[j]):
                seen.setdefault(key, {}).setdefault(place, (torch.as_tensor(record.completion_ids[j]).long(),
                                                            *(row.network[n][j] for n in ("logps", "entropies",
                                                                                          "variance"))))  # fmt: skip
    out = []
    for key in sorted(seen):
        parts = list(zip(*seen[key].values()))
        out.append(Drawn(*(torch.stack(p) for p in parts)))
    return out


def sampling(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """The completions' drawn tokens look like draws from softmax(policy logits / temperature) (|Z| <= 5)."""
    check = Check(case.id)
    obs, rows = forward_rows(cache, run, check)
    if rows is None:
        return check.finish()
    generations = drawn_generations(rows)
    if not require(check, generations, "no completion's prompt was found: nothing to judge the sampling by"):
        return check.finish()
    judge_sampling(generations, obs.ran.stop_token_id, obs.ran.pad_token_id, check,
                   f"{len(generations)} generation(s) at temperature {obs.spec.temperature:g}")  # fmt: skip
    return check.finish()


def _places(record: LossRecord) -> list[int]:
    """Each row's place in its generation batch (its row number when the record does not say)."""
    if record.completions is None:
        return list(range(record.completion_mask.shape[0]))
    return [int(i) for i in torch.as_tensor(record.completions).reshape(-1).tolist()]


FORWARD_SCENARIOS = (
    Scenario("logit_recompute", logit_recompute, (),
             "temperature 0.7: each micro-batch's log-probs and entropies == float64 formulas from its logits"),
    Scenario("forward_recompute", forward_recompute, (),
             "LR 0, two passes, temperature 0.5: every log-prob (loss, old, reference) and entropy == float64 "
             "forwards of the run's own networks (also with prompts left-padded by 0 to 3 pads)",
             points=((), (("prompt_pads", PROMPT_PADS),))),
    Scenario("sampling", sampling, (),
             "the same run: the drawn completion tokens look like draws from the policy network at the temperature"),
)  # fmt: skip
