"""Correct trainers that differ from the reference in ways the contract allows (imported by `--target`).

Each is the reference trainer with one change a maintainer elsewhere might well make; the
gate must pass every one of them (tests/harness/algorithms/ppo/test_ppo_precision.py).
"""

from __future__ import annotations

import types

import torch

from harness.algorithms.ppo.targets.reference import factory as reference_factory
from tests.support.gate_variants import swapped_during_training


def float32_buffers(spec):
    """Statistics rounded through float32 buffers, as TRL keeps them, even in a float64 run."""

    def rounded(original):
        return lambda *args: original(*args).float().double()

    return swapped_during_training(reference_factory(spec), "microbatch_stats", rounded)


def extra_metrics(spec):
    """Logs metrics outside the contract too: a per-rank count and the learning rate."""
    run = reference_factory(spec)
    train = run.train

    def train_and_log_more():
        logs = train()
        for update, metrics in enumerate(logs):
            metrics["val/num_eos_tokens"] = float(update + 7 * spec.rank)  # differs between ranks
            metrics["lr"] = spec.learning_rate
        return logs

    run.train = train_and_log_more
    return run


def equivalent_loss(spec):
    """The same minibatch token-mean loss, arranged as per-token sums divided by the minibatch's counts."""
    run = reference_factory(spec)
    module, trainer = run.module, run.trainer

    def micro_step(self, ro, rows, n_response, n_value):
        cfg = self.config
        r_mask, v_mask = ro.response_mask[rows], ro.value_mask[rows]
        logits, vpred = self.model(ro.query_responses[rows], ro.context_length, self.pad_token_id, cfg.temperature)
        new_logprobs = module.selective_log_softmax(logits, ro.responses[rows])
        pg_loss, pg_clipfrac, ratio, log_ratio = module.policy_loss(
            new_logprobs, ro.logprobs[rows], ro.advantages[rows], r_mask, cfg.cliprange
        )
        vf_loss, vf_clipfrac = module.value_loss(vpred, ro.values[rows], ro.returns[rows], v_mask, cfg.cliprange_value)
        advantages, old_values, returns = ro.advantages[rows], ro.values[rows], ro.returns[rows]
        per_token_pg = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - cfg.cliprange, 1 + cfg.cliprange))
        clipped = old_values + (vpred - old_values).clamp(-cfg.cliprange_value, cfg.cliprange_value)
        per_token_vf = 0.5 * torch.max((vpred - returns) ** 2, (clipped - returns) ** 2)
        world = self.accelerator.num_processes
        loss = world * (
            (per_token_pg * r_mask).sum() / n_response + cfg.vf_coef * (per_token_vf * v_mask).sum() / n_value
        )
        self.accelerator.backward(loss)
        with torch.no_grad():
            entropy = module.entropy_from_logits(logits)
            return module.microbatch_stats(
                pg_loss, pg_clipfrac, vf_loss, vf_clipfrac, log_ratio, ratio, entropy, r_mask, v_mask
            )

    trainer.micro_step = types.MethodType(micro_step, trainer)
    return run


def pooled_off_by_1e3(spec):
    """Not correct: every pooled statistic logged 0.1 % too high (a relative error of 1e-3)."""
    run = reference_factory(spec)
    module, train = run.module, run.train

    def train_and_skew():
        logs = train()
        for metrics in logs:
            for name in (*module.RESPONSE_POOLED, *module.VALUE_POOLED, "val/ratio_var"):
                metrics[name] *= 1 + 1e-3
        return logs

    run.train = train_and_skew
    return run


for _factory in (float32_buffers, extra_metrics, equivalent_loss, pooled_off_by_1e3):
    _factory.algorithm = "ppo"  # a target names its algorithm: the gate never guesses it
