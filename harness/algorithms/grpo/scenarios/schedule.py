"""GRPO's schedule check: the counts a configuration implies and the order prompts are used in, from the records.

One run whose sizes leave the usual runs' even divisions: two prompts per generation from a prompt set of four,
two optimizer steps per generation, `max_steps` 7 and `logging_steps` 3. So the run makes four generations, the
last trained in one of its two steps, and logs three intervals, the last of one step (a partial last interval,
which the contract logs: docs/grpo-metrics.md, "A partial last interval"). From the loss records, the reward
calls and the logs, `schedule` holds it to

    optimizer steps                 == max_steps
    generations trained             == ceil(micro-batches / (steps_per_generation * num_iterations))
    generations scored              == the generations trained (none made and left untrained)
    logs                            == ceil(max_steps / logging_steps), the partial last included
    each log's `step`, where logged == logging_steps, 2 * logging_steps, ..., and max_steps
    each interval's pooled metrics  == the oracle fed that interval's records (the last, partial, one included)

and, where the target records the prompts its reward functions were given (`RewardCall.prompt_ids`), to the
one-pass rule: every prompt of the run is used once before any is used twice, and so on for every later pass;
counted per generation over every rank, no prompt's uses may exceed another's by more than one after any
generation. Right trainers order prompts differently (the reference's one seeded permutation, TRL's
RepeatSampler with a new permutation per epoch), and every one of them keeps this rule whenever the prompt set
is a whole number of generations' prompts, as here: TRL's sampler drops an epoch's last incomplete batch of
prompts, so with another prompt count its prompts are used unevenly by design, and the rule is not judged.

`lr_schedule` runs the learning rate's schedule: 6 optimizer steps of 3 micro-batches under a linear schedule
with a warm-up of 2, a weight decay of 0.1 and AdamW's betas and eps off every trainer's defaults (0.8, 0.99, 1e-6;
rates 0, 1/2, 1, 3/4, 1/2, 1/4 of the base). Each step's rate, the decay, the betas and eps against the declared
ones, each logged rate against the schedule (harness/checks/lr_schedule.py), and
each step recomputed under them (`optimizer_step`'s rules). A schedule advanced per backward pass runs 0, 3/4, 0,
0, 0, 0; one stepped before the optimizer 1/2, 1, 3/4, ...: the constant rate of every other run shows neither.
verify-dist runs it on every rank (`lr_schedule[ranks=N]`, ranks.py), where a schedule stepped once per process
runs 0, 1, 1/2, 0, 0, 0 on two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from harness.checks.lr_schedule import judge_schedule
from harness.checks.optimizer import declared_kind, judge_steps
from harness.instrument.loss import LossRecord, RewardCall
from harness.instrument.observe import Observation, ObservationCache, grad_copies
from harness.oracle.schedules import Schedule
from harness.require import require_ran
from harness.scenario import Case, Scenario
from harness.verdict import Check, CheckResult

from ..definitions import LOGGED, OPTIONAL, PARTIAL_LAST_INTERVAL
from ..instruments import recorded
from ..runs import LR_SCHEDULE, UNEVEN, spec_for
from ..spec import GRPOSpec
from .pooled import pooled_check
from .reward_inputs import strip_pads

SCHEDULE = UNEVEN.with_(name="schedule", per_device_train_batch_size=4, gradient_accumulation_steps=1,
                        steps_per_generation=2, max_steps=7, logging_steps=3, num_prompts=4)  # fmt: skip
"""Four prompts, two per generation (8 completions in groups of 4), two steps per generation; 7 steps logged
every 3: four generations (two passes over the prompts, the last generation half trained), logs at steps 3, 6
and 7."""


def log_steps(spec: GRPOSpec) -> list[int]:
    """The optimizer steps after which the run logs: every `logging_steps`-th, and `max_steps` last where a partial
    last interval is logged (`spec.partial_last_logged`)."""
    steps = list(range(spec.logging_steps, spec.max_steps + 1, spec.logging_steps))
    partial = spec.max_steps % spec.logging_steps and spec.partial_last_logged
    return [*steps, spec.max_steps] if partial else steps


def judged(cache: ObservationCache, obs: Observation, check: Check) -> Observation:
    """`obs` as its target's `partial_last_interval` has it judged: a target that may leave the partial last interval
    unlogged (`optional`, TRL's: transformers' Trainer logs at multiples of logging_steps) and logged only the whole
    intervals is held to those, noted; one that logged it, and every target that declares `logged`, to all."""
    target = cache.target
    declared = target.definition(PARTIAL_LAST_INTERVAL, LOGGED) if target is not None else LOGGED
    whole = obs.spec.max_steps // obs.spec.logging_steps
    if declared != OPTIONAL or obs.ran is None or len(obs.ran.logs) != whole or whole == obs.spec.total_logs:
        return obs
    check.note(f"the partial last interval (steps {whole * obs.spec.logging_steps + 1} to {obs.spec.max_steps}) is "
               f"not logged, as the target's {PARTIAL_LAST_INTERVAL}={OPTIONAL!r} allows")  # fmt: skip
    return dataclasses.replace(obs, spec=obs.spec.with_(partial_last_logged=False))


def generation_problems(records: Sequence[LossRecord], calls: Sequence[RewardCall], spec: GRPOSpec) -> list[str]:
    """Why the generations trained and scored are not those the configuration implies, per rank ([] when they are):
    ceil(micro-batches / (steps_per_generation * num_iterations)) generations, numbered from 0, each scored."""
    per_generation = spec.generation_steps * spec.num_iterations
    problems = []
    for rank in sorted({int(r.rank) for r in records}):
        mine = [r for r in records if int(r.rank) == rank]
        where = f" on rank {rank}" if rank else ""
        expected = list(range(-(-len(mine) // per_generation)))
        trained = sorted({int(r.generation) for r in mine})
        if trained != expected:
            problems.append(f"generations trained{where} {trained}, expected {expected}: {len(mine)} micro-batches "
                            f"of {per_generation} per generation (steps_per_generation * num_iterations)")  # fmt: skip
        scored = sorted({int(c.generation) for c in calls if int(c.rank) == rank and int(c.index) == 0})
        if calls and scored != trained:
            problems.append(f"generations scored{where} {scored}, trained {trained}: a generation made is trained, "
                            f"and every trained one was scored")  # fmt: skip
    return problems


def prompt_uses(calls: Sequence[RewardCall], prompts: torch.Tensor, pad: int, group: int
                ) -> tuple[list[list[int]], str]:  # fmt: skip
    """(the prompts, as indices into the run's `prompts`, of each generation's groups over every rank, in
    generation order; why they could not be had, or '')."""
    known: dict[tuple[int, ...], int] = {}
    for i, row in enumerate(prompts.long().tolist()):
        known.setdefault(strip_pads(row, pad), i)
    if len(known) < len(prompts):
        return [], "the run's prompts are not all different: their uses cannot be told apart"
    given = [c for c in calls if int(c.index) == 0 and c.prompt_ids is not None]
    if not given:
        return [], "the target recorded no prompts given to its reward functions (RewardTap.wrap's `prompts`)"
    by_generation: dict[int, list[int]] = {}
    for call in sorted(given, key=lambda c: (int(c.generation), int(c.rank))):
        for row in call.prompt_ids[::group]:
            index = known.get(strip_pads(row, pad))
            if index is None:
                return [], f"generation {call.generation}: a prompt {list(row)} that is not one of the run's"
            by_generation.setdefault(int(call.generation), []).append(index)
    return [by_generation[g] for g in sorted(by_generation)], ""


def one_pass_problem(uses: Sequence[Sequence[int]], count: int) -> str:
    """Why the prompts' uses break the one-pass rule (module docstring), or ''."""
    used = [0] * count
    for generation, prompts in enumerate(uses):
        for index in prompts:
            used[index] += 1
        if max(used) - min(used) > 1:
            unused = [i for i, n in enumerate(used) if n == min(used)]
            again = [i for i, n in enumerate(used) if n == max(used)]
            return (f"after generation {generation + 1} prompt(s) {again} were used {max(used)} times and {unused} "
                    f"{min(used)}: a prompt was used again while another was not yet used in this pass "
                    f"(prompts per generation {[list(p) for p in uses[: generation + 1]]})")  # fmt: skip
    return ""


def schedule(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """The counts of steps, generations and logs the configuration implies, each log's step, each interval's pooled
    metrics (the partial last included), and the one-pass rule of the prompts where they are recorded."""
    check = Check(case.id)
    obs = judged(cache, cache.get(spec_for(SCHEDULE, run), spy=False), check)
    spec = obs.spec
    pooled_check(cache, obs, check)  # the steps (one window each), the logs' count, every interval's stats
    if obs.ran is None:
        return check.finish()
    logs = obs.ran.logs
    if len(logs) == spec.total_logs:
        logged = [int(log["step"]) for log in logs if "step" in log]
        if len(logged) == len(logs) and logged != log_steps(spec):
            last = f" and the last, max_steps={spec.max_steps}" if spec.partial_last_logged else ""
            check.fail(f"logged at steps {logged}, expected {log_steps(spec)} (every logging_steps="
                       f"{spec.logging_steps}{last})")  # fmt: skip
    records = recorded(obs.ran).loss_inputs or ()
    calls = recorded(obs.ran).reward_calls or ()
    for problem in generation_problems(records, calls, spec):
        check.fail(problem)
    if obs.ran.prompts is None:
        check.note("the run exposes no prompts: the one-pass rule is not judged")
        return check.finish()
    prompts = torch.as_tensor(obs.ran.prompts)
    uses, why = prompt_uses(calls, prompts, obs.ran.pad_token_id, spec.num_generations)
    per_generation = len(uses[0]) if uses else 0
    if why or len(prompts) % max(per_generation, 1):
        check.note(why or f"{len(prompts)} prompts, {per_generation} per generation: the one-pass rule is not judged")
        return check.finish()
    problem = one_pass_problem(uses, len(prompts))
    if problem:
        check.fail(problem)
    else:
        check.note(f"{sum(map(len, uses))} prompt uses in {len(uses)} generations over {len(prompts)} prompts: "
                   f"each used once before any twice")  # fmt: skip
    return check.finish()


def lr_schedule(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Each step's learning rate, weight decay, betas and eps, and the logged rates, against the run's declared
    schedule and settings; each step recomputed under them."""
    check = Check(case.id)
    with grad_copies():
        obs = cache.get(spec_for(LR_SCHEDULE, run), spy=False)
    if require_ran(obs, check) is None:
        return check.finish()
    spec = obs.spec
    judge_schedule(obs.ran.grads, check, declared_schedule(spec), spec.weight_decay, logged_rates(obs.ran, spec),
                   settings=spec.optimizer_settings)
    judge_steps(obs.ran.grads, check, declared_kind(cache), where="under the schedule")
    return check.finish()


def declared_schedule(spec: GRPOSpec) -> Schedule:
    """The learning-rate schedule `spec` declares, over its max_steps."""
    return Schedule(spec.lr_scheduler_type, spec.learning_rate, spec.warmup_steps, spec.max_steps)


def logged_rates(ran, spec: GRPOSpec) -> list[tuple[int, float]] | None:
    """(optimizer steps so far, logged `learning_rate`) of each of `ran`'s logs that has one; None when none has."""
    logs = [(int(log.get("step", at)), float(log["learning_rate"]))
            for log, at in zip(ran.logs, log_steps(spec)) if "learning_rate" in log]  # fmt: skip
    return logs or None


SCHEDULE_SCENARIOS = (
    Scenario("schedule", schedule, (),
             "4 prompts, 2 per generation, 7 steps logged every 3: steps, generations trained and scored, the 3 logs "
             "(the partial last) and their steps == what the configuration implies, each interval pooled == oracle; "
             "every prompt used once before any twice"),
    Scenario("lr_schedule", lr_schedule, (),
             "6 steps under a linear schedule (warm-up 2), weight decay 0.1, betas (0.8, 0.99) and eps 1e-6: each "
             "step's rate, decay, betas and eps == the declared ones, each logged rate == the schedule's, each step "
             "== the float64 AdamW recomputation"),
)  # fmt: skip
