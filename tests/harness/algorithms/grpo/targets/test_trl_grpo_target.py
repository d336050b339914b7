"""The `trl-grpo` target: TRL's GRPOTrainer builds, trains, records every loss micro-batch, and pools as measured.

The pooling here is the test's own float64 arithmetic on the recorded `loss_inputs` (docs/grpo-metrics.md,
section 2), independent of the gate's oracle.
`python tests/harness/algorithms/grpo/targets/test_trl_grpo_target.py` prints the measurements that
docs/trl-grpo.md reports.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from harness.algorithms.grpo.targets import trl as trl_grpo
from harness.errors import HarnessConfigError

pytestmark = pytest.mark.trl


@pytest.fixture(scope="module", autouse=True)
def trl_grpo_trainer():
    """TRL's GRPO trainer, imported as the module's first test runs, not as pytest collects it (each pytest-xdist
    worker collects every module: the one that never runs these would pay its 3 s of imports too)."""
    pytest.importorskip("trl")
    return pytest.importorskip("trl.trainer.grpo_trainer", reason="TRL's GRPO trainer does not import (it needs "
                               "`requests`)")  # fmt: skip


KEYS = {
    "held",
    "generation",
    "window",
    "rank",
    "completion_mask",
    "logps",
    "old_logps",
    "ref_logps",
    "advantages",
    "entropies",
    "logit_gaps",
    "logp_grad",
    "completions",
    "completion_ids",
    "old_entropies",  # the pass before the update's (a target that logs that pass's entropy fills it; TRL's: None)
    "entropy_grad",  # dL/dH per token, where the loss differentiates the entropies (an entropy bonus)
}
OPTIONAL = ("old_entropies", "entropy_grad")
"""Filled only where they apply: neither in these runs (TRL's entropy is the update's; no entropy bonus)."""
TENSORS = ("logps", "old_logps", "ref_logps", "advantages", "entropies", "logp_grad", "old_entropies", "entropy_grad")
TOKEN_MEANS = ("entropy", "kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")


def grpo_spec(**changes) -> types.SimpleNamespace:
    """A stand-in for the GRPO run spec: the reference GRPOConfig's field names, LR 0, beta 0.1, 8 completions."""
    fields = dict(
        name="trl-grpo-test",
        seed=0,
        device="cpu",
        dtype="float32",
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
        num_generations=4,
        num_iterations=1,
        max_steps=1,
        logging_steps=1,
        learning_rate=0.0,
        max_completion_length=8,
        temperature=1.0,
        stop_token_id=None,
        loss_type="dapo",
        beta=0.1,
        use_bias_correction_kl=True,
        epsilon_low=0.2,
        epsilon_high=0.2,
        delta=None,
        scale_rewards="group",
        reward_weights=None,
        max_grad_norm=None,
    )
    fields.update(changes)
    return types.SimpleNamespace(**fields)


# Two cuts of the same generation batch of 8 completions: 2 micro-batches of 4, or 4 of 2.
CUT_4x2 = grpo_spec()
CUT_2x4 = grpo_spec(per_device_train_batch_size=2, gradient_accumulation_steps=4, steps_per_generation=4)
# TRL issue 7047's shape: 4 micro-batches per generation in windows of 3, so the second window holds 1.
SHORT_WINDOW = grpo_spec(
    per_device_train_batch_size=2, gradient_accumulation_steps=3, steps_per_generation=4, max_steps=2, logging_steps=2
)
# Ratios away from 1: the second window runs after an optimizer step, against the first window's old log-probs.
CLIPPED = grpo_spec(
    per_device_train_batch_size=2,
    steps_per_generation=4,
    max_steps=2,
    logging_steps=2,
    learning_rate=0.05,
    epsilon_low=0.02,
    epsilon_high=0.02,
)


# ------------------------------------------------------------------ the test's own pooling


def per_token(entry: dict, spec) -> dict[str, torch.Tensor]:
    """The per-token values of docs/grpo-metrics.md section 2 for one recorded micro-batch (float64)."""
    logps = entry.logps
    old = entry.old_logps if entry.old_logps is not None else logps
    ratio = torch.exp(logps - old)
    advantage = entry.advantages.unsqueeze(1)
    low = ((ratio < 1 - spec.epsilon_low) & (advantage < 0)).double()
    high = ((ratio > 1 + spec.epsilon_high) & (advantage > 0)).double()
    values = {
        "entropy": entry.entropies,
        "clip_ratio/low_mean": low,
        "clip_ratio/high_mean": high,
        "clip_ratio/region_mean": torch.maximum(low, high),
    }
    clipped = torch.clamp(ratio, 1 - spec.epsilon_low, 1 + spec.epsilon_high)
    loss = -torch.min(ratio * advantage, clipped * advantage)
    if entry.ref_logps is not None:
        gap = entry.ref_logps - logps
        kl = torch.exp(gap) - gap - 1
        values["kl"] = kl * ratio if spec.use_bias_correction_kl else kl
        loss = loss + spec.beta * values["kl"]
    values["loss"] = loss
    return values


def pooled(entries: list[dict], spec) -> dict[str, float]:
    """Each token mean as the contract pools it (one sum over one count) and as a flat mean of micro-batch means."""
    out: dict[str, float] = {}
    tables = [(e.completion_mask.double(), per_token(e, spec)) for e in entries]
    for name in (*TOKEN_MEANS, "loss"):
        if name not in tables[0][1]:
            continue
        sums = [(values[name] * mask).sum().item() for mask, values in tables]
        counts = [mask.sum().item() for mask, _ in tables]
        out[name] = sum(sums) / sum(counts)
        out[f"{name} (flat)"] = sum(s / c for s, c in zip(sums, counts, strict=True)) / len(sums)
    high = [(values["clip_ratio/high_mean"] * mask).sum(1) / mask.sum(1) for mask, values in tables]
    out["clip_ratio/high_max"] = max(h.max().item() for h in high)
    out["clip_ratio/high_max (mean of maxima)"] = sum(h.max().item() for h in high) / len(high)
    return out


def interval(run, index: int) -> list[dict]:
    """The recorded micro-batches of logging interval `index`."""
    return [e for e in run.loss_inputs if e.window // run.spec.logging_steps == index]


def window_losses(run, entries: list[dict]) -> list[float]:
    """Each window's loss as docs/grpo-metrics.md section 4 defines it for the run's loss type."""
    spec, out = run.spec, []
    for window in sorted({e.window for e in entries}):
        rows = [(e, e.completion_mask.double(), per_token(e, spec)["loss"]) for e in entries if e.window == window]
        summed = sum((loss * mask).sum().item() for _, mask, loss in rows)
        if spec.loss_type == "grpo":
            per_completion = torch.cat([(loss * mask).sum(1) / mask.sum(1) for _, mask, loss in rows])
            out.append(per_completion.mean().item())
        elif spec.loss_type == "bnpo":  # each micro-batch's own token mean, averaged (TRL's local batch)
            out.append(sum((loss * mask).sum().item() / mask.sum().item() for _, mask, loss in rows) / len(rows))
        elif spec.loss_type == "dr_grpo":
            out.append(summed / (sum(mask.shape[0] for _, mask, _ in rows) * spec.max_completion_length))
        else:  # dapo: over the generation batch's tokens times the window's share of it
            generation = {e.generation for e, _, _ in rows}
            assert len(generation) == 1, "a window of two generations"
            tokens = sum(e.completion_mask.sum().item() for e in run.loss_inputs if e.generation in generation)
            out.append(summed / (tokens / spec.num_iterations * len(rows) / spec.steps_per_generation))
    return out


def completions(run) -> list[tuple[int, float]]:
    """Each completion as (length, summed log-prob), sorted: what two cuts of one generation batch share."""
    seen = []
    for e in run.loss_inputs:
        mask = e.completion_mask
        seen += [(int(m.sum()), round((lp * m).sum().item(), 5)) for m, lp in zip(mask, e.logps, strict=True)]
    return sorted(seen)


def trained(spec, **build_args):
    run = trl_grpo.build(spec, **build_args)
    return run, run.train()


# ------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def cut_4x2():
    return trained(CUT_4x2)


@pytest.fixture(scope="module")
def cut_2x4():
    return trained(CUT_2x4, extra={"entropy_coef": 0.01})  # with an entropy bonus TRL logs policy_loss


@pytest.fixture(scope="module")
def short_window():
    return trained(SHORT_WINDOW)


def test_run_satisfies_the_target_protocol(cut_4x2):
    from harness.instrument.observe import missing_members

    run, logs = cut_4x2
    assert missing_members(run) == []
    assert run.module.__name__ == "trl.trainer.grpo_trainer"
    assert callable(run.module.selective_log_softmax) and callable(run.module.entropy_from_logits)
    assert type(run.optimizer).__module__.startswith("torch.optim")
    held = {id(p) for group in run.optimizer.param_groups for p in group["params"]}
    assert run.params and held == {id(p) for p in run.params}
    assert (run.pad_token_id, run.stop_token_id) == (0, 1)
    assert len(logs) == 1 and logs[0]["step"] == 1
    for name in (*TOKEN_MEANS, "clip_ratio/low_min", "clip_ratio/high_max", "loss", "completions/mean_length"):
        assert name in logs[0], name


@pytest.mark.parametrize("which", ["cut_4x2", "cut_2x4", "short_window"])
def test_loss_inputs_are_complete_and_consistent(which, request):
    run, _ = request.getfixturevalue(which)
    spec = run.spec
    micro_batches = run.trainer._step
    assert len(run.loss_inputs) == micro_batches > 0
    assert micro_batches == spec.steps_per_generation * spec.num_iterations  # one generation in each of these runs
    for entry in run.loss_inputs:
        assert {f.name for f in dataclasses.fields(entry)} == KEYS
        assert all(getattr(entry, name) is not None for name in KEYS - {"old_logps", *OPTIONAL}), entry  # all filled
        assert entry.held["logps"] == entry.held["entropies"] == str(spec.dtype)  # as TRL held them, before the copy
        mask = entry.completion_mask
        assert mask.dtype == torch.bool and mask.shape[0] == spec.per_device_train_batch_size
        assert mask.shape[1] <= spec.max_completion_length
        lengths = mask.sum(1)
        assert (lengths >= 1).all()
        assert (mask == (torch.arange(mask.shape[1]) < lengths.unsqueeze(1))).all()  # a prefix of each row
        for name in TENSORS:
            value = getattr(entry, name)
            if value is None:
                continue
            assert value.dtype == torch.float64 and value.device.type == "cpu" and not value.requires_grad
            assert value.shape == (mask.shape if name != "advantages" else mask.shape[:1])
            assert torch.isfinite(value[mask] if value.dim() == 2 else value).all()
        assert entry.ref_logps is not None  # beta = 0.1
        gaps = entry.logit_gaps  # TRL's log-probs and entropies against float64 from its logits (measured 8e-7)
        assert all(0 <= g < 1e-5 for g in (gaps.logps, gaps.entropies)), gaps
        assert (entry.generation, entry.rank) == (0, 0)
        ids = entry.completion_ids  # TRL's padded ids: the mask ends at the first EOS, or runs to the last id
        assert ids.dtype == torch.int64 and ids.shape == mask.shape
    lengths = torch.cat([e.completion_mask.sum(1) for e in run.loss_inputs])
    assert len(set(lengths.tolist())) > 1, "the toy world should give completions of uneven length"
    # each row named by its place in the generation batch the reward function scored: every one once per pass
    rows = sorted(torch.cat([e.completions for e in run.loss_inputs]).tolist())
    batch = spec.per_device_train_batch_size * spec.steps_per_generation
    assert rows == sorted(list(range(batch)) * spec.num_iterations)
    (call,) = run.reward_calls  # one reward function, one generation
    assert (call.generation, call.rank, call.function, call.index) == (0, 0, "toy_reward", 0)
    assert call.scores.shape == (batch,) and call.scores.dtype == torch.float64


def test_windows_and_old_logps_follow_trls_loop(cut_4x2, short_window):
    run, _ = cut_4x2
    assert [e.window for e in run.loss_inputs] == [0, 0]
    assert all(e.old_logps is None for e in run.loss_inputs)  # one window per generation: on-policy
    run, logs = short_window
    assert [e.window for e in run.loss_inputs] == [0, 0, 0, 1]  # the last window of the generation is short
    assert len(logs) == 1 and logs[0]["step"] == 2
    for entry in run.loss_inputs:  # 3 % 4 != 0: TRL keeps old log-probs; at LR 0 they are the current ones
        assert entry.old_logps is not None
        mask = entry.completion_mask
        assert (entry.logps - entry.old_logps)[mask].abs().max().item() < 1e-5


def test_two_cuts_of_one_generation_log_flat_means_of_micro_batch_means(cut_4x2, cut_2x4):
    """The known departure, measured: at LR 0 the same completions cut differently log different token means."""
    (run_a, logs_a), (run_b, logs_b) = cut_4x2, cut_2x4
    assert completions(run_a) == completions(run_b)  # the same generation batch
    a, b = pooled(interval(run_a, 0), run_a.spec), pooled(interval(run_b, 0), run_b.spec)
    for name in ("entropy", "kl"):
        assert a[name] == pytest.approx(b[name], rel=1e-9)  # the contract's value does not see the cut
        for logged, mine in ((logs_a[0][name], a), (logs_b[0][name], b)):
            assert logged == pytest.approx(mine[f"{name} (flat)"], rel=1e-6)  # TRL: flat mean of micro-batch means
            assert abs(logged - mine[name]) > 1e-3 * abs(mine[name])  # ... which is not the pooled value
        assert abs(logs_a[0][name] - logs_b[0][name]) > 1e-3 * abs(a[name])
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/high_max"):
        assert logs_a[0][name] == logs_b[0][name] == a[name] == 0.0  # LR 0: every ratio is 1


def test_dapo_loss_and_policy_loss(cut_4x2, cut_2x4):
    """dapo's loss is the window's token mean; the logged policy_loss is that over the accumulation steps."""
    run, logs = cut_4x2  # one window per interval, no entropy bonus: TRL's `loss` is the window's loss
    assert logs[0]["loss"] == pytest.approx(pooled(interval(run, 0), run.spec)["loss"], rel=1e-6)
    run, logs = cut_2x4
    contract = pooled(interval(run, 0), run.spec)["loss"]
    assert logs[0]["policy_loss"] == pytest.approx(contract / run.spec.gradient_accumulation_steps, rel=1e-6)
    assert abs(logs[0]["policy_loss"] - contract) > 0.5 * abs(contract)


def test_high_max_is_a_mean_of_micro_batch_maxima():
    """With clipping (LR 0.05, epsilon 0.02, old log-probs from the first window) high_max is not the maximum."""
    run, logs = trained(CLIPPED)
    entries = interval(run, 0)
    assert [e.window for e in entries] == [0, 0, 1, 1]
    mine = pooled(entries, run.spec)
    assert mine["clip_ratio/high_max"] > 0
    assert logs[0]["clip_ratio/high_max"] == pytest.approx(mine["clip_ratio/high_max (mean of maxima)"], rel=1e-6)
    assert logs[0]["clip_ratio/high_max"] < 0.5 * mine["clip_ratio/high_max"]
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert logs[0][name] == pytest.approx(mine[f"{name} (flat)"], rel=1e-6)
        assert abs(logs[0][name] - mine[name]) > 1e-3


def test_spec_errors_are_usage_errors():
    with pytest.raises(HarnessConfigError, match="has no max_steps"):
        spec = grpo_spec()
        del spec.max_steps
        trl_grpo.build(spec)
    with pytest.raises(HarnessConfigError, match="whole number of groups"):
        trl_grpo.build(grpo_spec(per_device_train_batch_size=3, steps_per_generation=1))
    with pytest.raises(HarnessConfigError, match="EOS"):
        trl_grpo.build(grpo_spec(stop_token_id=5))
    with pytest.raises(HarnessConfigError, match="cannot import"):
        trl_grpo.build_for("no_such_module.grpo_trainer")(grpo_spec())
    assert trl_grpo.build_for("trl.trainer.grpo_trainer").module == "trl.trainer.grpo_trainer"


# ------------------------------------------------------------------ the measurements of docs/trl-grpo.md

MEASURED = {
    "4x2 (bs 4, gas 2, spg 2)": (CUT_4x2, {}),
    "2x4 (bs 2, gas 4, spg 4), entropy_coef 0.01": (CUT_2x4, {"extra": {"entropy_coef": 0.01}}),
    "2x4 in windows of 2 (bs 2, gas 2, spg 4, logging_steps 2)": (
        grpo_spec(per_device_train_batch_size=2, steps_per_generation=4, max_steps=2, logging_steps=2),
        {},
    ),
    "windows 3+1 (bs 2, gas 3, spg 4, logging_steps 2)": (SHORT_WINDOW, {}),
    "windows 3+1, bnpo": (grpo_spec(**{**vars(SHORT_WINDOW), "loss_type": "bnpo"}), {}),
    "windows 3+1, grpo": (grpo_spec(**{**vars(SHORT_WINDOW), "loss_type": "grpo"}), {}),
    "windows 3+1, dr_grpo": (grpo_spec(**{**vars(SHORT_WINDOW), "loss_type": "dr_grpo"}), {}),
    "4x2 twice (num_iterations 2, logging_steps 2)": (grpo_spec(num_iterations=2, max_steps=2, logging_steps=2), {}),
    "LR 0.05, epsilon 0.02, windows of 2 (bs 2, gas 2, spg 4, logging_steps 2)": (CLIPPED, {}),
}

if __name__ == "__main__":
    for title, (spec, build_args) in MEASURED.items():
        run, logs = trained(spec, **build_args)
        entries, logged = interval(run, 0), logs[0]
        mine = pooled(entries, spec)
        print(f"\n{title}: {spec.loss_type}, micro-batch tokens {[int(e.completion_mask.sum()) for e in entries]}")
        for name in (*TOKEN_MEANS, "clip_ratio/high_max"):
            if name in logged:
                related = {k: round(v, 6) for k, v in mine.items() if k.split(" ")[0] == name}
                print(f"  {name}: logged {logged[name]:.6f}  recomputed {related}")
        windows = window_losses(run, entries)
        print(
            f"  loss: logged {logged['loss']:.6f}  mean of window losses {sum(windows) / len(windows):.6f} "
            f"(windows {[round(w, 6) for w in windows]})  token mean {mine['loss']:.6f}"
        )
        if "policy_loss" in logged:
            steps = spec.gradient_accumulation_steps
            print(f"  policy_loss: logged {logged['policy_loss']:.6f}  token mean / {steps} {mine['loss'] / steps:.6f}")
