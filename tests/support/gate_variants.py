"""Targets for the gate's own tests: broken trainers and broken adapters (imported by `--target`)."""

from __future__ import annotations

import types

import torch

from harness.algorithms.ppo.targets.reference import factory as reference_factory


def swapped_during_training(run, name: str, replacement):
    """`run` with `run.module.<name>` replaced by `replacement(original)` while it trains, restored after."""
    module, train = run.module, run.train
    original = getattr(module, name)

    def patched_train():
        setattr(module, name, replacement(original))
        try:
            return train()
        finally:
            setattr(module, name, original)

    run.train = patched_train
    return run


def mean_of_means(spec):
    """Bug class 1: every pooled metric is the mean of per-micro-batch means (equal weight per micro-batch)."""
    run = reference_factory(spec)
    module = run.module
    fields = module.STAT_FIELDS
    r_count, v_count = fields.index("count/response"), fields.index("count/value")

    def replacement(original):
        def pooled_stats(rows):
            rows = rows.clone()
            for name in module.RESPONSE_POOLED + module.VALUE_POOLED:
                count = rows[:, r_count] if name in module.RESPONSE_POOLED else rows[:, v_count]
                rows[:, fields.index(name)] /= count.clamp(min=1)
            rows[:, r_count] = 1.0
            rows[:, v_count] = 1.0
            return original(rows)

        return pooled_stats

    return swapped_during_training(run, "pooled_stats", replacement)


def value_stats_on_the_response_mask(spec):
    """Bug class 6: the value loss is averaged over R (one position short) instead of V."""

    def replacement(original):
        def value_loss(vpred, old_values, returns, mask, cliprange_value):
            shifted = torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1) & mask
            return original(vpred, old_values, returns, shifted, cliprange_value)

        return value_loss

    return swapped_during_training(reference_factory(spec), "value_loss", replacement)


def nan_when_nothing_to_average(spec):
    """Bug class 12 at the scale of an update: a pooled mean over no token divides 0 by 0."""
    run = reference_factory(spec)
    module = run.module

    def replacement(original):
        def pooled_stats(rows):
            metrics = original(rows)
            totals = rows.sum(dim=0)
            for name in module.RESPONSE_POOLED:
                count = totals[module.STAT_FIELDS.index("count/response")]
                metrics[name] = (totals[module.STAT_FIELDS.index(name)] / count).item()
            return metrics

        return pooled_stats

    return swapped_during_training(run, "pooled_stats", replacement)


def nan_weight_at_the_last_step(spec):
    """A weight left NaN by the run's last optimizer step, as an overflowing optimizer leaves it: every number the
    run logged came before that step and is finite, and so is every gradient."""
    run = reference_factory(spec)
    last, taken = spec.total_updates * spec.steps_per_update, []

    def poison(optimizer, args, kwargs):
        taken.append(len(taken))
        if len(taken) == last:
            with torch.no_grad():
                run.params[0].view(-1)[0] = float("nan")

    run.optimizer.register_step_pre_hook(poison)
    return run


def no_spy_functions(spec):
    """An adapter whose trainer module has neither masked_mean nor selective_log_softmax."""
    run = reference_factory(spec)
    run.module = types.ModuleType("trainer_without_spied_functions")
    return run


def not_a_run(spec):
    """An adapter that returns something that is not a TargetRun."""
    return object()


def whitening_not_seen(spec):
    """A correct trainer whose site map names a whitening function it does not have: the raw advantages go unseen."""
    from harness.algorithms.ppo.contract import SiteMap

    run = reference_factory(spec)
    run.site_map = SiteMap(whiten="no_such_function")
    return run


def protocol_only(run, **members):
    """`run` with only the TargetRun protocol's members, plus `members`: what else an adapter exposes is hidden."""
    return types.SimpleNamespace(
        module=run.module,
        optimizer=run.optimizer,
        params=run.params,
        pad_token_id=run.pad_token_id,
        stop_token_id=run.stop_token_id,
        train=run.train,
        **members,
    )


def value_head_hidden(spec):
    """A correct trainer whose adapter exposes no `value_head`: the values it trained on go unseen."""
    run = reference_factory(spec)
    return protocol_only(run, scores=run.reward.given)


def reward_model_unseen(spec):
    """A correct trainer scored by its reward model, whose adapter exposes another copy of it, never called: the
    head the trainer read goes unrecorded."""
    import copy

    run = reference_factory(spec)
    return protocol_only(run, value_head=run.value_head, reward_model=copy.deepcopy(run.reward_model))


def oversampling(spec):
    """Samples twice the prompts it should each update (a rollout larger than the update optimises)."""
    run = reference_factory(spec)
    draw = run.trainer.next_queries
    run.trainer.next_queries = lambda: torch.cat([draw(), draw()])
    return run


def responses_past_response_length(spec):
    """Pads each sampled response with 3 more pad tokens than response_length allows."""

    def replacement(original):
        def sample_responses(*args, **kwargs):
            responses = original(*args, **kwargs)
            return torch.nn.functional.pad(responses, (0, 3), value=run.pad_token_id)

        return sample_responses

    run = reference_factory(spec)
    return swapped_during_training(run, "sample_responses", replacement)


for _factory in (
    mean_of_means,
    value_stats_on_the_response_mask,
    nan_when_nothing_to_average,
    no_spy_functions,
    not_a_run,
    whitening_not_seen,
    value_head_hidden,
    reward_model_unseen,
    oversampling,
    responses_past_response_length,
):
    _factory.algorithm = "ppo"  # a target names its algorithm: the gate never guesses it
