"""The curated catalogue: one mutant per bug class of docs/bug-catalogue.md, PPO's and GRPO's.

Each mutant re-creates, inside `reference_ppo`, a bug that shipped (or was found in
review) in a public RL trainer, and names the checks of the gate that must kill it.
A patch is a list of exact text replacements; each `old` must occur exactly once
in its file, so that a refactor of the trainer breaks the catalogue loudly instead
of leaving a mutant that no longer mutates anything (see `apply`).

`killed_by` lists check ids of `verify.json` (e.g. "uneven_split[epochs=1]") or
scenario names (e.g. "uneven_split", which covers both epoch variants). The runner
counts a mutant as killed only when the verify run exits 1 and at least one of
these checks failed. A GRPO mutant (`algorithm="grpo"`, ids `g<class>_...`) patches
`reference_ppo/grpo.py` and names checks of the GRPO gate, against `reference-grpo`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TRAINER = "reference_ppo/trainer.py"
GRPO_TRAINER = "reference_ppo/grpo.py"
TARGETS = {"ppo": "reference", "grpo": "reference-grpo"}
"""The target each algorithm's mutants are verified against (`python -m harness verify --target ...`)."""


def _checks(algorithm: str = "ppo") -> dict[str, tuple[str, str]]:
    """Check id of verify.json -> (scenario name, pytest node name of the test that records it).

    Generated from the gate's own scenarios (`harness.algorithms`), never typed here.
    """
    from harness.algorithms import check_ids

    return {cid: (scenario, f"test_check[{cid}]") for cid, scenario in check_ids(algorithm).items()}


CHECKS: dict[str, tuple[str, str]] = _checks()
"""The PPO gate's checks (the default run's)."""
ALGORITHM_CHECKS: dict[str, dict[str, tuple[str, str]]] = {"ppo": CHECKS, "grpo": _checks("grpo")}
"""Each algorithm's checks: GRPO reuses some scenario names (freshness, all_masked), so they are kept apart."""
# killed_by entry that stands for "any check of the two-process run" (`python -m harness verify-dist`)
VERIFY_DIST = "verify_dist"


PPO_CLASSES = (*range(1, 16), *range(20, 48))
"""The PPO classes of docs/bug-catalogue.md (16-19 and 48-51 are GRPO's): each needs a mutant or a reason."""
GRPO_CLASSES = (16, 17, 18, 19, 48, 49, 50, 51)
"""The GRPO classes of docs/bug-catalogue.md: each needs a GRPO mutant."""


class PatchError(RuntimeError):
    """A catalogue patch no longer matches the trainer: the catalogue has rotted."""


@dataclass(frozen=True)
class Replacement:
    """Replace `old` (which must occur exactly once in `file`) with `new`."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    """One curated mutant: metadata plus the patch that re-creates the bug."""

    id: str
    bug_class: int
    title: str
    source: str
    killed_by: tuple[str, ...]
    patch: tuple[Replacement, ...]
    command: str = "verify"
    """`verify` (the verify suite) or `verify-dist` (the two-process run)."""
    notes: str = ""
    algorithm: str = "ppo"
    """Whose gate kills it: its checks are that algorithm's, run against `TARGETS[algorithm]`."""

    @property
    def target(self) -> str:
        """The built-in target the mutant's verify run names."""
        return TARGETS[self.algorithm]


@dataclass(frozen=True)
class NotApplicable:
    """A bug class that cannot arise in the reference trainer, with the reason."""

    bug_class: int
    reason: str


def replace(old: str, new: str, file: str = TRAINER) -> Replacement:
    return Replacement(file, old, new)


def grpo_replace(old: str, new: str) -> Replacement:
    return Replacement(GRPO_TRAINER, old, new)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        id="c01_mean_of_microbatch_means",
        bug_class=1,
        title="pooled means are equal-weight means of per-micro-batch means",
        source="huggingface/trl issue 7012, PR 7041",
        killed_by=("uneven_split", "partition_invariance"),
        patch=(
            replace(
                "        metrics[name] = (totals[STAT_FIELDS.index(name)] / count).item() if count > 0 else 0.0\n",
                '        counts = rows[:, STAT_FIELDS.index("count/response" if name in RESPONSE_POOLED else '
                '"count/value")]\n'
                "        metrics[name] = (rows[:, STAT_FIELDS.index(name)] / counts.clamp(min=1)).mean().item()\n",
            ),
        ),
        notes="the short last micro-batch (2 rows of a 4+2 split) weighs as much as the full one",
    ),
    Mutant(
        id="c02_unwritten_slots_averaged",
        bug_class=2,
        title=(
            "(epochs, minibatches, grad-accum) stats buffer: zeros of unwritten slots enter val/ratio and val/ratio_var"
        ),
        source="huggingface/trl PR 7041",
        killed_by=("lr0_ratio",),
        patch=(
            replace(
                "        stats = []\n"
                "        for _ in range(cfg.num_ppo_epochs):\n"
                "            order = torch.randperm(cfg.local_batch_size, "
                "generator=self.minibatch_generator).to(ro.responses.device)\n"
                "            for start in range(0, cfg.local_batch_size, cfg.local_mini_batch_size):\n"
                "                stats += self.minibatch_step(ro, order[start : start + cfg.local_mini_batch_size])\n"
                "        return torch.stack(stats)\n",
                "        shape = (cfg.num_ppo_epochs, cfg.num_mini_batches, cfg.gradient_accumulation_steps, "
                "len(STAT_FIELDS))\n"
                "        stats = torch.zeros(shape, dtype=torch.float64, device=ro.responses.device)\n"
                "        for epoch in range(cfg.num_ppo_epochs):\n"
                "            order = torch.randperm(cfg.local_batch_size, "
                "generator=self.minibatch_generator).to(ro.responses.device)\n"
                "            for minibatch, start in enumerate(range(0, cfg.local_batch_size, "
                "cfg.local_mini_batch_size)):\n"
                "                for slot, row in enumerate(self.minibatch_step(ro, order[start : start + "
                "cfg.local_mini_batch_size])):\n"
                "                    stats[epoch, minibatch, slot] = row\n"
                "        return stats.reshape(-1, len(STAT_FIELDS))\n",
            ),
            replace(
                '    metrics["val/ratio_var"] = ratio_variance(rows)\n',
                '    slot_means = rows[:, STAT_FIELDS.index("val/ratio")] / rows[:, '
                'STAT_FIELDS.index("count/response")].clamp(min=1)\n'
                '    metrics["val/ratio"], metrics["val/ratio_var"] = slot_means.mean().item(), '
                "slot_means.var().item()\n",
            ),
        ),
        notes=(
            "at LR 0 with micro-batches 4+2 and gradient_accumulation_steps=3 it logs val/ratio 0.6667, "
            "val/ratio_var 0.2667"
        ),
    ),
    Mutant(
        id="c03_policy_loss_sample_weighted",
        bug_class=3,
        title="loss/policy_avg numerator weighted by the micro-batch's sample count instead of its token count",
        source="huggingface/trl PR 7041 (its own mutant)",
        killed_by=("uneven_split",),
        patch=(replace("            pg_loss.double() * n_r,\n", "            pg_loss.double() * r_mask.shape[0],\n"),),
    ),
    Mutant(
        id="c04_entropy_mask_off_by_one",
        bug_class=4,
        title="policy/entropy_avg sums the entropy over a response mask shifted by one position",
        source="huggingface/trl PR 7041 (its own mutant)",
        killed_by=("uneven_split",),
        patch=(
            replace(
                "            masked_sum(entropy.double(), r_mask),\n",
                "            masked_sum(entropy.double()[:, 1:], r_mask[:, :-1]),\n",
            ),
        ),
    ),
    Mutant(
        id="c05_plain_mean_over_pads",
        bug_class=5,
        title="approxkl, entropy and ratio are plain .mean()s over every position, pads included",
        source="huggingface/trl PR 7041, issue 6809",
        killed_by=("uneven_split",),
        patch=(
            replace(
                "            masked_sum(0.5 * log_ratio.double() ** 2, r_mask),\n"
                "            masked_sum(entropy.double(), r_mask),\n"
                "            masked_sum(ratio.double(), r_mask),\n",
                "            (0.5 * log_ratio.double() ** 2).mean() * n_r,\n"
                "            entropy.double().mean() * n_r,\n"
                "            ratio.double().mean() * n_r,\n",
            ),
        ),
    ),
    Mutant(
        id="c06_value_stats_response_mask",
        bug_class=6,
        title=(
            "loss/value_avg and val/clipfrac_avg weighted by the response mask (padding_mask) not the value mask "
            "(padding_mask_p1)"
        ),
        source="huggingface/trl PR 7041",
        killed_by=("uneven_split",),
        patch=(
            replace(
                "    n_r, n_v = r_mask.sum().double(), v_mask.sum().double()\n",
                "    n_r, n_v = r_mask.sum().double(), r_mask.sum().double()\n",
            ),
        ),
    ),
    Mutant(
        id="c07_pad_sentinel_in_entropy",
        bug_class=7,
        title="objective/entropy sums -logprobs with the pad sentinel INVALID_LOGPROB = 1.0 at pad positions",
        source="huggingface/trl PR 6121 (issue 2022)",
        killed_by=("rollout_objectives[rollout=uneven_split]",),
        patch=(
            replace(
                "masked_sum_rows(-logprobs, r_mask)",
                "(-logprobs.masked_fill(~r_mask, 1.0)).sum(1)",
            ),
        ),
    ),
    Mutant(
        id="c08_stale_rows_leak",
        bug_class=8,
        title="the stats buffer lives on the trainer and is never reset: the previous update's rows leak into this one",
        source="huggingface/trl PR 6861 (review finding)",
        killed_by=("freshness",),
        patch=(
            replace(
                "        stats = []\n        for _ in range(cfg.num_ppo_epochs):\n",
                '        stats = self.__dict__.setdefault("stats_buffer", [])\n        for _ in '
                "range(cfg.num_ppo_epochs):\n",
            ),
        ),
    ),
    Mutant(
        id="c09_mean_of_rank_means",
        bug_class=9,
        title="pooled metrics are the mean over ranks of each rank's own pooled means",
        source="huggingface/trl PR 6380; NovaSky-AI/SkyRL issue 1822",
        killed_by=(VERIFY_DIST,),
        command="verify-dist",
        patch=(
            replace(
                "        metrics = pooled_stats(acc.gather(stats))\n",
                "        metrics = {\n"
                "            name: acc.reduce(torch.tensor(value, dtype=torch.float64, device=acc.device), "
                'reduction="mean").item()\n'
                "            for name, value in pooled_stats(stats).items()\n"
                "        }\n",
            ),
        ),
        notes="identical to the correct pooling in one process; only the two-process run can kill it",
    ),
    Mutant(
        id="c10_scaled_by_accumulation_steps",
        bug_class=10,
        title="logged losses divided by gradient_accumulation_steps (the scaled loss that is backpropagated)",
        source="verl-project/verl issue 4711; huggingface/trl PRs 7047, 7053",
        killed_by=("uneven_split", "partition_invariance"),
        patch=(
            replace(
                "                pg_loss, pg_clipfrac, vf_loss, vf_clipfrac, log_ratio, ratio, entropy, r_mask, "
                "v_mask\n",
                "                pg_loss / cfg.gradient_accumulation_steps,\n"
                "                pg_clipfrac,\n"
                "                vf_loss / cfg.gradient_accumulation_steps,\n"
                "                vf_clipfrac, log_ratio, ratio, entropy, r_mask, v_mask\n",
            ),
        ),
    ),
    Mutant(
        id="c11_last_microbatch_only",
        bug_class=11,
        title="only the last micro-batch's statistics are logged",
        source="karpathy/autoresearch issue 357",
        killed_by=("uneven_split",),
        patch=(replace("        return torch.stack(stats)\n", "        return torch.stack(stats[-1:])\n"),),
    ),
    Mutant(
        id="c12_empty_microbatch_counts",
        bug_class=12,
        title=(
            "an all-masked micro-batch counts as one token: its zero pulls the response means (and val/ratio_var) down"
        ),
        source="NVIDIA NeMo-RL issue 212; NovaSky-AI/SkyRL issue 1817",
        killed_by=("all_masked",),
        patch=(
            replace(
                "    n_r, n_v = r_mask.sum().double(), v_mask.sum().double()\n",
                "    n_r, n_v = r_mask.sum().double().clamp(min=1), v_mask.sum().double().clamp(min=1)\n",
            ),
        ),
        notes="the NaN variant (masked_mean dividing by the raw count) is among mutmut's mutants of masked_mean",
    ),
    Mutant(
        id="c13_padding_rows_in_objectives",
        bug_class=13,
        title="per-sample objective sums padded with zero rows up to a multiple of the rollout chunk, then averaged",
        source="verl-project/verl issue 7771",
        killed_by=("rollout_objectives[rollout=padding_rows]",),
        patch=(
            replace(
                "        return rollout, per_sample\n",
                "        chunk = min(cfg.local_rollout_forward_batch_size, len(per_sample))\n"
                "        return rollout, F.pad(per_sample, (0, 0, 0, -len(per_sample) % chunk))\n",
            ),
        ),
        notes="a batch of 12 in chunks of 5 is averaged over 15 rows; a batch that fits one chunk is unaffected",
    ),
    Mutant(
        id="c14_loss_sample_count_factor",
        bug_class=14,
        title=(
            "each micro-batch's token-mean loss divided by the number of micro-batches: the gradient depends on the "
            "split"
        ),
        source=(
            "verl-project/verl issue 5625; modelscope/twinkle PR 292; ml-explore/mlx-lm PR 1413; "
            "huggingface/transformers PR 34191"
        ),
        killed_by=("gradient_partition",),
        patch=(
            replace(
                "        loss = world * (pg_loss * r_mask.sum() / n_response + cfg.vf_coef * vf_loss * v_mask.sum() "
                "/ n_value)\n",
                "        loss = world * (pg_loss + cfg.vf_coef * vf_loss) / -(\n"
                "            -cfg.local_mini_batch_size // cfg.per_device_train_batch_size\n"
                "        )\n",
            ),
        ),
    ),
    Mutant(
        id="c15_global_accumulation_counter",
        bug_class=15,
        title=(
            "optimizer steps every gradient_accumulation_steps micro-batches on a counter that crosses minibatch and "
            "update boundaries"
        ),
        source="trl 1.12.0 (measured with micro-batches 4+2 and gradient_accumulation_steps=3)",
        killed_by=("every_microbatch_applied",),
        patch=(
            replace(
                "                stats.append(self.micro_step(ro, rows[start : start + step], n_response, n_value))\n"
                "        if self.config.max_grad_norm is not None:\n"
                "            acc.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)\n"
                "        self.optimizer.step()\n"
                "        self.optimizer.zero_grad()\n",
                "                stats.append(self.micro_step(ro, rows[start : start + step], n_response, n_value))\n"
                '            self.accumulated = getattr(self, "accumulated", 0) + 1\n'
                "            if self.accumulated % self.config.gradient_accumulation_steps == 0:\n"
                "                if self.config.max_grad_norm is not None:\n"
                "                    acc.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)\n"
                "                self.optimizer.step()\n"
                "                self.optimizer.zero_grad()\n",
            ),
        ),
        notes=(
            "micro-batches of a minibatch's tail are stepped in the next minibatch or update, and the last ones never"
        ),
    ),
    Mutant(
        id="c20_entropy_without_temperature",
        bug_class=20,
        title="entropy logged from the raw logits, not from the temperature-scaled ones the policy samples from",
        source="OpenRLHF/OpenRLHF PR 1319",
        killed_by=("settings_sweep[settings=temperature,check=uneven_split]",),
        patch=(
            replace(
                "            entropy = entropy_from_logits(logits)\n",
                "            entropy = entropy_from_logits(logits * cfg.temperature)\n",
            ),
        ),  # fmt: skip
        notes="invisible at temperature 1, where every other scenario runs",
    ),
    Mutant(
        id="c21_k3_wrong_direction",
        bug_class=21,
        title="k3 KL estimator with the ratio the wrong way round (estimates KL(ref || policy))",
        source="Rolv-Arild/rocket-learn PR 12",
        killed_by=("settings_sweep[settings=k3,check=rollout_objectives]",),
        patch=(
            replace(
                '    return -log_ratio if estimator == "k1" else log_ratio.exp() - 1 - log_ratio\n',
                '    return -log_ratio if estimator == "k1" else (-log_ratio).exp() - 1 + log_ratio\n',
            ),
        ),
        notes="the default estimator is k1; only a run with kl_estimator=k3 sees it",
    ),
    Mutant(
        id="c22_eos_penalty_twice",
        bug_class=22,
        title="the missing-EOS penalty subtracted twice from a response's score",
        source="no public report; the double application of a reward-side penalty that the trainer applies again",
        killed_by=("settings_sweep[settings=whiten_eos,check=rollout_objectives]",),
        patch=(
            replace(
                "            scores = scores - cfg.missing_eos_penalty * "
                "(~(postprocessed == cfg.stop_token_id).any(dim=1)).float()\n",
                "            scores = scores - 2 * cfg.missing_eos_penalty * (~(postprocessed == cfg.stop_token_id)"
                ".any(dim=1)).float()\n",
            ),
        ),
        notes="needs missing_eos_penalty set and a response without the stop token",
    ),
    Mutant(
        id="c23_clipped_every_microbatch",
        bug_class=23,
        title="gradient clipped after every micro-batch's backward, not once before the optimizer step",
        source="huggingface/transformers issue 986; facebookresearch/lingua PR 59",
        killed_by=("settings_sweep[settings=clipped,check=every_microbatch_applied]",),
        patch=(
            replace(
                "                stats.append(self.micro_step(ro, rows[start : start + step], n_response, n_value))\n"
                "        if self.config.max_grad_norm is not None:\n"
                "            acc.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)\n",
                "                stats.append(self.micro_step(ro, rows[start : start + step], n_response, n_value))\n"
                "            if self.config.max_grad_norm is not None:\n"
                "                acc.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)\n",
            ),
        ),
        notes="the step's norm still stays under max_grad_norm; its direction is not that of the clipped sum",
    ),
    Mutant(
        id="c24_nan_gradient_finite_logs",
        bug_class=24,
        title="the loss of an all-masked micro-batch is 0/0: NaN gradients while the logged statistics stay finite",
        source="NVIDIA NeMo-RL issue 212; NovaSky-AI/SkyRL issue 1817",
        killed_by=("all_masked",),
        patch=(
            replace(
                "        loss = world * (pg_loss * r_mask.sum() / n_response "
                "+ cfg.vf_coef * vf_loss * v_mask.sum() / n_value)\n",
                "        loss = world * (pg_loss * r_mask.sum() / r_mask.sum() * r_mask.sum() / n_response\n"
                "                        + cfg.vf_coef * vf_loss * v_mask.sum() / n_value)\n",
            ),
        ),
        notes="one update: the NaN weights it leaves behind never reach a logged number",
    ),
    Mutant(
        id="c25_logprobs_at_wrong_positions",
        bug_class=25,
        title="selective_log_softmax gathers each position's log-prob at the previous position's token",
        source="lucidrains/PaLM-rlhf-pytorch issue 31; opendilab/LightRFT PR 53",
        killed_by=("uneven_split",),
        patch=(
            replace(
                "        torch.log_softmax(at_least_float32(row), dim=-1).gather(-1, ids.unsqueeze(-1))\n",
                "        torch.log_softmax(at_least_float32(row), dim=-1).gather(-1, ids.roll(1).unsqueeze(-1))\n",
            ),
        ),
        notes="old and new log-probs are wrong alike, so the pooled statistics agree with the oracle; the spy does not",
    ),
    Mutant(
        id="c26_surrogate_min_for_max",
        bug_class=26,
        title="the clipped surrogate loss takes the min of the negated terms instead of the max",
        source="yandexdataschool/Practical_RL issue 248",
        killed_by=("training_signal",),
        patch=(
            replace(
                "    pg_loss = masked_mean(torch.max(unclipped, clipped_branch), mask)\n",
                "    pg_loss = masked_mean(torch.min(unclipped, clipped_branch), mask)\n",
            ),
        ),
        notes="pooled exactly right: only the per-token values against the formula show it",
    ),
    Mutant(
        id="c27_advantages_whitened_over_v",
        bug_class=27,
        title="advantages whitened over the value mask V (one position too many) instead of R",
        source="no public report; the mask mix-up of class 6, in the training signal instead of the statistics",
        killed_by=("training_signal",),
        patch=(
            replace(
                "        advantages = masked_whiten(advantages, r_mask) * r_mask\n",
                "        advantages = masked_whiten(advantages, v_mask) * r_mask\n",
            ),
        ),
        notes="every statistic is pooled right; the advantages it pools are not",
    ),
    Mutant(
        id="c28_loss_over_batch_tokens",
        bug_class=28,
        title="the minibatch loss divided by the token count of the whole rollout batch, not of the minibatch",
        source="no public report; the normaliser of class 14 taken over the wrong set of rows",
        killed_by=("logp_gradient",),
        patch=(
            replace(
                "        counts = torch.stack([ro.response_mask[rows].sum(), ro.value_mask[rows].sum()]).double()\n",
                "        counts = torch.stack([ro.response_mask.sum(), ro.value_mask.sum()]).double()\n",
            ),
        ),
        notes=(
            "every gradient is about 1 / num_mini_batches of the right one, whatever the cut: gradient_partition "
            "passes, the statistics pass; dL/dlogp against the formula does not"
        ),
    ),
    Mutant(
        id="c29_loss_over_accumulation_steps",
        bug_class=29,
        title="the minibatch token-mean loss divided by gradient_accumulation_steps again before backward",
        source=(
            "no public report found; accelerate's Accelerator.backward already divides the loss by its "
            "gradient_accumulation_steps, so a trainer that divides too scales it twice"
        ),
        killed_by=("logp_gradient",),
        patch=(
            replace(
                "        self.accelerator.backward(loss)\n",
                "        self.accelerator.backward(loss / cfg.gradient_accumulation_steps)\n",
            ),
        ),
        notes="a loss already averaged over the minibatch's tokens is scaled down once more",
    ),
    Mutant(
        id="c30_value_loss_response_weighted",
        bug_class=30,
        title="each micro-batch's value loss weighted by its share of the response tokens, not of the value tokens",
        source="no public report; the mask mix-up of class 6 (trl PR 7041), in the loss instead of the statistics",
        killed_by=("gradient_decomposition",),
        patch=(
            replace(
                "        loss = world * (pg_loss * r_mask.sum() / n_response + cfg.vf_coef * vf_loss * v_mask.sum() "
                "/ n_value)\n",
                "        loss = world * (pg_loss * r_mask.sum() / n_response + cfg.vf_coef * vf_loss * r_mask.sum() "
                "/ n_response)\n",
            ),
        ),
        notes="the logged statistics and dL/dlogp are right; only the value model's gradient is weighted wrong",
    ),
    Mutant(
        id="c31_loss_without_world_factor",
        bug_class=31,
        title="the loss on each rank is its share of the global token mean, but data parallelism averages the ranks",
        source=(
            "no public report found; DDP averages gradients over ranks, so a loss that sums to the global mean "
            "over ranks needs the world size back"
        ),
        killed_by=(VERIFY_DIST,),
        command="verify-dist",
        patch=(
            replace(
                "        loss = world * (pg_loss * r_mask.sum() / n_response + cfg.vf_coef * vf_loss * v_mask.sum() "
                "/ n_value)\n",
                "        loss = pg_loss * r_mask.sum() / n_response + cfg.vf_coef * vf_loss * v_mask.sum() / n_value\n",
            ),
        ),
        notes="identical in one process (world 1); on 2 ranks every gradient is half the right one",
    ),
    Mutant(
        id="c32_local_token_count",
        bug_class=32,
        title="the minibatch loss divided by this rank's token count, not the count over every rank",
        source="no public report found; class 9 (trl PR 6380, SkyRL issue 1822) in the loss instead of the logs",
        killed_by=(VERIFY_DIST,),
        command="verify-dist",
        patch=(
            replace(
                '        n_response, n_value = acc.reduce(counts, reduction="sum").clamp(min=1)\n',
                "        n_response, n_value = counts.clamp(min=1)\n",
            ),
        ),
        notes="identical in one process; on 2 ranks with unequal token counts each rank's tokens weigh differently",
    ),
    Mutant(
        id="c33_sync_on_first_microbatch",
        bug_class=33,
        title="gradients synchronised across ranks on the first micro-batch of a minibatch instead of the last",
        source="no public report found; accelerate's no_sync must cover every micro-batch but the last",
        killed_by=(VERIFY_DIST,),
        command="verify-dist",
        patch=(
            replace(
                "            with acc.no_sync(self.model) if not is_last else contextlib.nullcontext():\n",
                "            with acc.no_sync(self.model) if start else contextlib.nullcontext():\n",
            ),
        ),
        notes="the later micro-batches' gradients stay local: the ranks step with different gradients",
    ),
    Mutant(
        id="c34_returns_from_whitened_advantages",
        bug_class=34,
        title="the value target is taken from the whitened advantages instead of the raw ones",
        source="no public report; the ordering pitfall 'returns = advantages + values' before normalisation "
        "that PPO implementation write-ups warn of",
        killed_by=("training_signal",),
        patch=(
            replace(
                "        advantages = masked_whiten(advantages, r_mask) * r_mask\n",
                "        advantages = masked_whiten(advantages, r_mask) * r_mask\n"
                "        returns = advantages + values\n",
            ),
        ),
        notes="the policy side is right; only the per-token value loss against the returns shows it",
    ),
    Mutant(
        id="c35_gae_without_lambda",
        bug_class=35,
        title="GAE accumulates with gamma alone: the lambda factor is missing",
        source="no public report",
        killed_by=("training_signal",),
        patch=(
            replace(
                "        last_gae = delta + gamma * lam * last_gae\n",
                "        last_gae = delta + gamma * last_gae\n",
            ),
        ),
        notes="the statistics pool right; the raw advantages at the whitening call are not GAE(gamma, lam)",
    ),
    Mutant(
        id="c36_score_on_last_token",
        bug_class=36,
        title="the score lands on the last response token instead of one past it",
        source="no public report",
        killed_by=("training_signal",),
        patch=(
            replace(
                "    last = (sequence_lengths + 1).clamp(min=0, max=kl.shape[1] - 1)\n",
                "    last = sequence_lengths.clamp(min=0, max=kl.shape[1] - 1)\n",
            ),
        ),
        notes="objective/scores still right (a per-sample mean); the rewards GAE sees are not",
    ),
    Mutant(
        id="c37_value_clip_around_returns",
        bug_class=37,
        title="the new values are clipped around the returns instead of the rollout's old values",
        source="no public report",
        killed_by=("training_signal",),
        patch=(
            replace(
                "    vpred_clipped = torch.clamp(vpred, old_values - cliprange_value, old_values + cliprange_value)\n",
                "    vpred_clipped = torch.clamp(vpred, returns - cliprange_value, returns + cliprange_value)\n",
            ),
        ),
        notes="loss/value_avg pools the per-token values right; they are not the clipped value loss",
    ),
    Mutant(
        id="c38_value_clipfrac_counts_ties",
        bug_class=38,
        title="the value clip indicator counts ties (>=): every token inside the clip range counts as clipped",
        source="no public report",
        killed_by=("training_signal",),
        patch=(
            replace(
                "    vf_clipfrac = masked_mean((clipped > unclipped).float(), mask)\n",
                "    vf_clipfrac = masked_mean((clipped >= unclipped).float(), mask)\n",
            ),
        ),
        notes="val/clipfrac_avg pools the indicator right; the indicator is wrong",
    ),
    Mutant(
        id="c39_reward_whitening_drops_mean",
        bug_class=39,
        title="reward whitening removes the mean (shift_mean=True) instead of keeping it",
        source="no public report",
        killed_by=("settings_sweep[settings=whiten_eos,check=training_signal]",),
        patch=(
            replace(
                "            rewards = masked_whiten(rewards, v_mask, shift_mean=False) * v_mask\n",
                "            rewards = masked_whiten(rewards, v_mask, shift_mean=True) * v_mask\n",
            ),
        ),
        notes="only with whiten_rewards: the raw advantages at the whitening call are not GAE of the rewards",
    ),
    Mutant(
        id="c40_rewards_whitened_over_r",
        bug_class=40,
        title="rewards whitened over the response mask R instead of the value mask V",
        source="no public report; class 27's mask mix-up, on the rewards",
        killed_by=("settings_sweep[settings=whiten_eos,check=training_signal]",),
        patch=(
            replace(
                "            rewards = masked_whiten(rewards, v_mask, shift_mean=False) * v_mask\n",
                "            rewards = masked_whiten(rewards, r_mask, shift_mean=False) * v_mask\n",
            ),
        ),
        notes="only with whiten_rewards: the reward-whitening call's mask is not V",
    ),
    Mutant(
        id="c41_value_term_sign_flipped",
        bug_class=41,
        title="the value term subtracted from the loss instead of added",
        source="no public report; found by mutmut in PPOTrainer.micro_step (micro_step__mutmut_42)",
        killed_by=("logp_gradient",),
        patch=(
            replace(
                "/ n_response + cfg.vf_coef * vf_loss * v_mask.sum() / n_value)\n",
                "/ n_response - cfg.vf_coef * vf_loss * v_mask.sum() / n_value)\n",
            ),
        ),
        notes=(
            "the value model climbs its loss; every statistic and dL/dlogp are right, and gradient_decomposition "
            "compares a step with its own micro-batches, flipped alike: dL/dv against the formula is -1 times it"
        ),
    ),
    Mutant(
        id="c42_value_term_doubled",
        bug_class=42,
        title="the value term's 0.5 left out of the loss (but not of the logged value loss)",
        source="no public report; the 0.5 of the clipped value loss kept in the statistic, dropped from the loss",
        killed_by=("logp_gradient",),
        patch=(
            replace(
                "/ n_response + cfg.vf_coef * vf_loss * v_mask.sum() / n_value)\n",
                "/ n_response + cfg.vf_coef * 2 * vf_loss * v_mask.sum() / n_value)\n",
            ),
        ),
        notes="the logs are right and dL/dlogp too; dL/dv against the formula is twice it",
    ),
    Mutant(
        id="c43_dropout_left_on",
        bug_class=43,
        title="the models left in train mode: dropout acts in the rollout and in the update",
        source="huggingface/trl issue 4; trl PRs 1540, 3234 (dropout disabled for this reason)",
        killed_by=(
            "settings_sweep[settings=dropout,check=lr0_ratio]",
            "settings_sweep[settings=dropout,check=gradient_partition]",
        ),
        patch=(replace("        self.model.eval()\n", "        self.model.train()\n"),),
        notes=(
            "invisible without dropout in the models, where every other scenario runs; with attention dropout 0.1 "
            "the update's log-probs are another draw than the rollout's: val/ratio 1.13 at LR 0"
        ),
    ),
    Mutant(
        id="c46_forward_without_attention_mask",
        bug_class=46,
        title="the policy's forward is given the token ids alone: it attends to the prompt's left pads",
        source=(
            "left-padded queries need an attention mask and position ids that skip the pads "
            "('The N+ Implementation Details of RLHF with PPO', Huang et al. 2024); a forward without them"
        ),
        killed_by=("forward_recompute[run=left_padded]",),
        patch=(
            replace(
                "    out = policy(**model_inputs(query_responses, pad_token_id), return_dict=True)\n",
                "    out = policy(input_ids=query_responses, return_dict=True)\n",
            ),
        ),
        notes=(
            "rollout, reference and new log-probs come from the same wrong forward, so every statistic, the "
            "training signal and the gradients agree with them; only the network's own log-probs on the real "
            "tokens differ, and only where a prompt is left-padded"
        ),
    ),
    Mutant(
        id="c44_reward_at_last_padded_position",
        bug_class=44,
        title="the reward model's head read at the last position of the padded sequence, not the last real token",
        source="vwxyzjn/lm-human-preference-details issue 6 (`reward[:, -1]` under right padding); "
        "huggingface/transformers issue 35352 and trl PR 6952 (review) for other wrong positions",
        killed_by=(
            "settings_sweep[settings=reward_model,check=rollout_objectives]",
            "settings_sweep[settings=reward_model,check=training_signal]",
        ),
        patch=(
            replace(
                "    return per_token[torch.arange(len(last), device=last.device), last].float()\n",
                "    return per_token[:, -1].float()\n",
            ),
        ),
        notes="only under a reward model: a padded row is scored at a pad position; every pooled statistic is right",
    ),
    Mutant(
        id="c45_logprobs_without_temperature",
        bug_class=45,
        title="log-probs taken from the raw logits while the rollout samples at the temperature",
        source="OpenRLHF/OpenRLHF PR 853; NVIDIA/NeMo-Aligner issue 46",
        killed_by=("sampling[temperature=0.5]",),
        patch=(
            replace(
                "    return out.logits[:, context_length - 1 : -1] / temperature\n",
                "    return out.logits[:, context_length - 1 : -1]\n",
            ),
        ),
        notes="rollout and update agree (ratio 1 at LR 0, every pooled mean recomputes); only the drawn tokens "
        "show that the log-probs describe another distribution than the one sampled",
    ),
    Mutant(
        id="c47_reward_text_with_special_tokens",
        bug_class=47,
        title="the reward on text given the responses decoded with their special tokens (pad, stop) kept",
        source="verl PR 715; OpenRLHF issue 775",
        killed_by=(
            "settings_sweep[settings=reward_text,check=rollout_objectives]",
            "settings_sweep[settings=reward_text,check=training_signal]",
        ),
        patch=(
            replace(
                "        texts = tokenizer.batch_decode(responses, skip_special_tokens=True)\n",
                "        texts = tokenizer.batch_decode(responses, skip_special_tokens=False)\n",
            ),
        ),
        notes="only under a reward on text: the scores the trainer uses are the reward's for strings with pad "
        "and stop tokens in them; every statistic is computed correctly from those scores",
    ),
)

GRPO_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        id="g16_flat_mean_of_microbatch_means",
        bug_class=16,
        title="GRPO token means logged as a flat mean of per-micro-batch means over the interval",
        source="trl 1.12.0 GRPOTrainer.log (measured); huggingface/trl issue 7047",
        killed_by=("uneven_lengths", "partition"),
        patch=(
            grpo_replace(
                "    metrics = {name: _ratio(totals[name], tokens) "
                'for name in TOKEN_POOLED if with_kl or name != "kl"}\n',
                '    per_micro = rows[:, STAT_FIELDS.index("count/tokens")].clamp(min=1)\n'
                "    metrics = {name: (rows[:, STAT_FIELDS.index(name)] / per_micro).mean().item()\n"
                '               for name in TOKEN_POOLED if with_kl or name != "kl"}\n',
            ),
        ),
        notes="a micro-batch of few tokens weighs as much as one of many",
        algorithm="grpo",
    ),
    Mutant(
        id="g17_window_means_averaged",
        bug_class=17,
        title="GRPO: one value per optimizer window (its token means), windows averaged",
        source="huggingface/trl PR 7053 (closed)",
        killed_by=("short_window",),
        patch=(
            grpo_replace(
                "                stats, clips = self.micro_step(batch, rows, denominator)\n"
                "            self.interval.stats.append(stats)\n",
                "                stats, clips = self.micro_step(batch, rows, denominator)\n"
                "            window_rows = [*(window_rows if i else []), stats]\n",
            ),
            grpo_replace(
                "        if cfg.max_grad_norm is not None:\n"
                "            acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)\n"
                "        self.optimizer.step()\n",
                "        window = torch.stack(window_rows).sum(dim=0)\n"
                '        tokens = STAT_FIELDS.index("count/tokens")\n'
                '        window[: STAT_FIELDS.index("policy_loss/completion_sum")] /= window[tokens].clamp(min=1)\n'
                "        window[tokens] = 1.0\n"
                "        self.interval.stats.append(window)\n"
                "        if cfg.max_grad_norm is not None:\n"
                "            acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)\n"
                "        self.optimizer.step()\n",
            ),
        ),
        notes="with windows of 3 and 1 micro-batches the short window counts as much as the long one",
        algorithm="grpo",
    ),
    Mutant(
        id="g18_mean_of_microbatch_extremes",
        bug_class=18,
        title="clip_ratio/low_min and high_max logged as the mean of per-micro-batch extremes",
        source="trl 1.12.0 GRPOTrainer (measured: 0.18 logged, true maximum 0.5)",
        killed_by=("extremes",),
        patch=(
            grpo_replace(
                "        metrics.update(clip_extremes(acc.gather(torch.cat(interval.clips))))\n",
                "        per_micro = [clip_extremes(acc.gather(block)) for block in interval.clips]\n"
                "        metrics.update({k: sum(e[k] for e in per_micro) / len(per_micro) for k in per_micro[0]})\n",
            ),
        ),
        notes="a micro-batch without a clipped token pulls the maximum down",
        algorithm="grpo",
    ),
    Mutant(
        id="g19_dapo_loss_share_of_window",
        bug_class=19,
        title="dapo policy_loss logged as each micro-batch's share of its window's loss, averaged as a mean",
        source="trl 1.12.0 GRPO policy_loss with loss_type dapo (measured)",
        killed_by=("partition", "uneven_lengths[loss_type=dapo]"),
        patch=(
            grpo_replace(
                "                token_loss,\n                completion_loss,\n                mask,\n            )\n",
                '                loss.detach() / world if cfg.loss_type == "dapo" else token_loss,\n'
                "                completion_loss,\n                mask,\n            )\n",
            ),
        ),
        notes="about the token mean divided by the accumulation steps: it moves with gradient_accumulation_steps",
        algorithm="grpo",
    ),
    Mutant(
        id="g08_interval_not_reset",
        bug_class=8,
        title="GRPO: the interval's rows are not cleared after a log, so the next log pools them again",
        source="the class-8 leak (trl PR 6861) in a GRPO trainer's logging interval",
        killed_by=("freshness",),
        patch=(
            grpo_replace(
                "        self.interval = Interval()\n        self.history.append(metrics)\n",
                "        self.history.append(metrics)\n",
            ),
        ),
        notes="the first log is right; every later one pools every earlier interval too",
        algorithm="grpo",
    ),
    Mutant(
        id="g14_bnpo_mean_of_microbatch_means",
        bug_class=14,
        title="bnpo loss as each micro-batch's token mean over the accumulation steps: the gradient depends on the cut",
        source="trl 1.12.0 GRPOTrainer bnpo normalisation (docs/grpo-metrics.md, section 7)",
        killed_by=("gradient_partition[loss_type=bnpo]",),
        patch=(
            grpo_replace(
                "        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) "
                "* world / denominator\n",
                '        if cfg.loss_type == "bnpo":\n'
                "            loss = token_loss * world / cfg.gradient_accumulation_steps\n"
                "        else:\n"
                "            loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) "
                "* world / denominator\n",
            ),
        ),
        notes="the logged statistics are pooled right; only the gradient shows it",
        algorithm="grpo",
    ),
    Mutant(
        id="g20_entropy_of_unscaled_logits",
        bug_class=20,
        title="GRPO entropy taken from the logits before the temperature, not the ones the log-probs come from",
        source="OpenRLHF PR 1319 (the GRPO form of class 20)",
        killed_by=("logit_recompute",),
        patch=(
            grpo_replace(
                "            entropies = entropy_from_logits(logits)\n",
                "            entropies = entropy_from_logits(logits * cfg.temperature)\n",
            ),
        ),
        notes="exact at temperature 1; the pooled entropy checks recompute from the recorded entropies and pass",
        algorithm="grpo",
    ),
    Mutant(
        id="g15_global_accumulation_counter",
        bug_class=15,
        title=(
            "GRPO: the optimizer steps every gradient_accumulation_steps micro-batches on a counter that runs across "
            "windows and generations"
        ),
        source="the class-15 counter (trl 1.12.0, measured) in a GRPO trainer's accumulation windows",
        killed_by=("every_microbatch_applied",),
        patch=(
            grpo_replace(
                "                self.interval.completion_records.setdefault((batch.index, row), "
                "batch.completion_records[row])\n"
                "        if cfg.max_grad_norm is not None:\n"
                "            acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)\n"
                "        self.optimizer.step()\n"
                "        self.optimizer.zero_grad()\n",
                "                self.interval.completion_records.setdefault((batch.index, row), "
                "batch.completion_records[row])\n"
                '            self.accumulated = getattr(self, "accumulated", 0) + 1\n'
                "            if self.accumulated % cfg.gradient_accumulation_steps == 0:\n"
                "                if cfg.max_grad_norm is not None:\n"
                "                    acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)\n"
                "                self.optimizer.step()\n"
                "                self.optimizer.zero_grad()\n",
            ),
        ),
        notes=(
            "with windows of 3 and 1 the steps come after micro-batches 3 and 6: a window's gradient is applied with "
            "the next window's, and the last micro-batches' never"
        ),
        algorithm="grpo",
    ),
    Mutant(
        id="g12_empty_microbatch_counts",
        bug_class=12,
        title="GRPO: an all-masked micro-batch counts as one token, so its zero pulls the token means down",
        source=(
            "NVIDIA NeMo-RL issue 212; NovaSky-AI/SkyRL issue 1817; trl 1.12.0 GRPOTrainer logs an empty "
            "micro-batch's token means as 0 (a count clamped to 1)"
        ),
        killed_by=("all_masked",),
        patch=(grpo_replace("    n = mask.sum().double()\n", "    n = mask.sum().double().clamp(min=1)\n"),),
        notes="the loss is right; only the pooled statistics count the empty micro-batch",
        algorithm="grpo",
    ),
    Mutant(
        id="g24_nan_gradient_finite_stats",
        bug_class=24,
        title="GRPO: the loss of an all-masked micro-batch is 0/0, so its gradient is NaN while its statistics are 0",
        source="NVIDIA NeMo-RL issue 212; NovaSky-AI/SkyRL issue 1817 (the GRPO form of class 24)",
        killed_by=("all_masked",),
        patch=(
            grpo_replace(
                "        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) "
                "* world / denominator\n",
                "        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) / mask.sum() "
                "* mask.sum() * world / denominator\n",
            ),
        ),
        notes="the statistics take the guarded masked_mean; the recorder sees the NaN gradient at the step",
        algorithm="grpo",
    ),
    Mutant(
        id="g09_mean_of_rank_means",
        bug_class=9,
        title="GRPO token means and policy_loss pooled on each rank, then the ranks' values averaged",
        source="huggingface/trl PR 6380 (the GRPO form of class 9)",
        killed_by=(VERIFY_DIST,),
        patch=(
            grpo_replace(
                "        metrics = pooled_stats(\n"
                "            acc.gather(torch.stack(interval.stats)), cfg.loss_type, cfg.max_completion_length, "
                "cfg.beta != 0\n"
                "        )\n",
                "        local = pooled_stats(torch.stack(interval.stats), cfg.loss_type, cfg.max_completion_length, "
                "cfg.beta != 0)\n"
                "        values = torch.tensor(list(local.values()), dtype=torch.float64, device=acc.device)\n"
                '        metrics = dict(zip(local, acc.reduce(values, reduction="mean").tolist()))\n',
            ),
        ),
        command="verify-dist",
        notes="on one process it is exact; over two ranks of different completion lengths it is not",
        algorithm="grpo",
    ),
    Mutant(
        id="g43_dropout_left_on",
        bug_class=43,
        title="GRPO policy left in train mode: dropout acts in the old log-probs and in the update",
        source="huggingface/trl PR 3234 (the GRPO form of class 43)",
        killed_by=("partition[dropout=0.1]",),
        patch=(grpo_replace("        self.model.eval()\n", "        self.model.train()\n"),),
        notes="invisible without dropout in the models; with attention dropout 0.1, tokens are clipped at LR 0",
        algorithm="grpo",
    ),
    Mutant(
        id="g29_dapo_divided_by_accumulation_steps",
        bug_class=29,
        title="GRPO dapo loss, already over the window's share of the generation's tokens, divided by the "
        "accumulation steps again",
        source="modelscope/ms-swift issue 10117, PR 10116 (the GRPO form of class 29)",
        killed_by=("logp_gradient", "gradient_partition[loss_type=dapo]"),
        patch=(
            grpo_replace(
                "        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) "
                "* world / denominator\n",
                "        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) "
                "* world / denominator\n"
                '        if cfg.loss_type == "dapo":\n'
                "            loss = loss / cfg.gradient_accumulation_steps\n",
            ),
        ),
        notes="every logged statistic is right; the gradient is 1/gradient_accumulation_steps of dapo's",
        algorithm="grpo",
    ),
    Mutant(
        id="g28_dapo_generation_tokens_unscaled",
        bug_class=28,
        title="GRPO dapo loss over the whole generation batch's tokens in every window, not the window's share",
        source="huggingface/trl issue 5619, PR 6024 (the GRPO form of class 28)",
        killed_by=("logp_gradient",),
        patch=(
            grpo_replace(
                "        return max(counts.generation_tokens, 1.0) * counts.generation_share\n",
                "        return max(counts.generation_tokens, 1.0)\n",
            ),
        ),
        notes="exact when a window is the whole generation (every gradient_partition cut); with two windows per "
        "generation each window's gradient is half dapo's, the same factor in every micro-batch",
        algorithm="grpo",
    ),
    Mutant(
        id="g26_clipped_surrogate_max",
        bug_class=26,
        title="GRPO clipped surrogate: the max of the negated terms is taken as the min (-max(rA, clip(r)A))",
        source="yandexdataschool/Practical_RL issue 248 (the GRPO form of class 26)",
        killed_by=("logp_gradient[run=extremes]", "extremes"),
        patch=(
            grpo_replace(
                "    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)\n",
                "    per_token_loss = -torch.max(coef_1 * advantages, coef_2 * advantages)\n",
            ),
        ),
        notes="exact while every ratio lies inside the clip range; only tokens outside it show",
        algorithm="grpo",
    ),
    Mutant(
        id="g21_k3_wrong_way_round",
        bug_class=21,
        title="GRPO k3 KL with the log-ratio the wrong way round: exp(logp - ref) - (logp - ref) - 1",
        source="Rolv-Arild/rocket-learn PR 12 (the GRPO form of class 21)",
        killed_by=("logp_gradient", "uneven_lengths"),
        patch=(
            grpo_replace(
                "            per_token_kl = kl_to_reference(per_token_logps, ref_per_token_logps, ratio)\n",
                "            per_token_kl = kl_to_reference(ref_per_token_logps, per_token_logps, ratio)\n",
            ),
        ),
        notes="the logged kl is the other direction's too; its gradient pushes the policy the wrong way",
        algorithm="grpo",
    ),
    Mutant(
        id="g41_kl_term_subtracted",
        bug_class=41,
        title="GRPO: the KL penalty subtracted from the loss instead of added",
        source="no public report (class 41's sign slip, found by mutmut in the value term, in GRPO's KL term)",
        killed_by=("logp_gradient", "uneven_lengths"),
        patch=(
            grpo_replace(
                "            per_token_loss = per_token_loss + cfg.beta * per_token_kl\n",
                "            per_token_loss = per_token_loss - cfg.beta * per_token_kl\n",
            ),
        ),
        notes="the logged kl is right; policy_loss and the gradient reward moving away from the reference",
        algorithm="grpo",
    ),
    Mutant(
        id="g31_no_world_factor",
        bug_class=31,
        title="GRPO loss not multiplied by the number of ranks, whose gradients data parallelism averages",
        source="no public report found (the GRPO form of class 31)",
        killed_by=(VERIFY_DIST,),
        patch=(
            grpo_replace(
                "        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) "
                "* world / denominator\n",
                "        loss = loss_numerator(cfg.loss_type, token_loss, completion_loss, mask) / denominator\n",
            ),
        ),
        command="verify-dist",
        notes="exact on one process; on two every gradient is half the objective's",
        algorithm="grpo",
    ),
    Mutant(
        id="g48_population_std",
        bug_class=48,
        title="GRPO advantages divided by the population std (divisor n), not the Bessel-corrected one",
        source="numpy std and nanstd default to ddof=0 (numbagg issue 138: that default, changed); no GRPO report",
        killed_by=("advantages", "reward_stats"),
        patch=(grpo_replace("    var = total / (count - 1).clamp(min=1)\n", "    var = total / count.clamp(min=1)\n"),),
        notes="groups of 4: every scaled advantage 15% larger (sqrt(4/3)); the logged reward_std too",
        algorithm="grpo",
    ),
    Mutant(
        id="g49_batch_std_for_group",
        bug_class=49,
        title="GRPO: scale_rewards='group' divides the advantages by the generation batch's std",
        source="no public report found (TRL's scale_rewards has both branches side by side)",
        killed_by=("advantages[scale_rewards=group]",),
        patch=(
            grpo_replace(
                "        advantages = advantages / (group_std + STD_EPS)\n",
                "        advantages = advantages / (nanstd(rewards) + STD_EPS)\n",
            ),
        ),
        notes="only under 'group' (the default); every logged statistic is right",
        algorithm="grpo",
    ),
    Mutant(
        id="g50_unscorable_reward_as_zero",
        bug_class=50,
        title="GRPO: a completion no reward function could score gets reward 0, which enters its group's mean",
        source="huggingface/trl PR 5902 (nansum collapsed an all-NaN row to 0); trl PR 6426 (the same in SDPO)",
        killed_by=("advantages", "reward_stats"),
        patch=(
            grpo_replace(
                '    return total.masked_fill(per_function.isnan().all(dim=1), float("nan"))\n', "    return total\n"
            ),
        ),
        notes="the unscorable completion gets a spurious advantage and moves its scored siblings'",
        algorithm="grpo",
    ),
    Mutant(
        id="g51_reward_weights_ignored",
        bug_class=51,
        title="GRPO: the reward is the plain sum of the reward functions' scores, reward_weights not applied",
        source="NousResearch/atropos PR 485 (sub-reward weights ignored in a combined reward)",
        killed_by=("advantages", "reward_stats"),
        patch=(
            grpo_replace(
                "    total = (per_function * weights).nansum(dim=1)\n", "    total = per_function.nansum(dim=1)\n"
            ),
        ),
        notes="invisible with one reward function of weight 1 (every scenario but the reward ones); the logged reward "
        "is the unweighted one too",
        algorithm="grpo",
    ),
    Mutant(
        id="g51_logged_reward_unweighted",
        bug_class=51,
        title="GRPO: logged reward and reward_std are the unweighted sum of the scores; the advantages are weighted",
        source="huggingface/trl issue 5352, PR 5353 (logged reward ignored reward_weights)",
        killed_by=("reward_stats",),
        patch=(
            grpo_replace(
                "[completion_mask.sum(dim=1).double(), terminated.double(), rewards[local], "
                "zero_std[local].double()], 1\n",
                "[completion_mask.sum(dim=1).double(), terminated.double(), per_function.nansum(dim=1), "
                "zero_std[local].double()], 1\n",
            ),
        ),
        notes="the training signal is right; only the dashboard's reward is not the one optimised",
        algorithm="grpo",
    ),
    Mutant(
        id="g52_length_with_prompt",
        bug_class=52,
        title="GRPO: completion lengths logged with the prompt's tokens counted in",
        source="modelscope/ms-swift PR 8247 (Megatron GRPO logged prompt + completion length); NousResearch/atropos "
        "PR 211 (a completion's length counted masked-out tokens)",
        killed_by=("completion_lengths",),
        patch=(
            grpo_replace(
                "[completion_mask.sum(dim=1).double(), terminated.double(),",
                "[(completion_mask.sum(dim=1) + queries.shape[1]).double(), terminated.double(),",
            ),
        ),
        notes="every length statistic off by the prompt length; the same for every cut, so the partition check is "
        "blind to it",
        algorithm="grpo",
    ),
    Mutant(
        id="g53_clipped_by_longest",
        bug_class=53,
        title="GRPO: clipped_ratio counts the completions as long as the interval's longest, not those that did not "
        "end with the stop token",
        source="verl-project/verl issue 7817, PR 7821 (truncation measured against the padded width, the batch's "
        "longest)",
        killed_by=("completion_lengths",),
        patch=(
            grpo_replace(
                '"completions/clipped_ratio": (~terminated).double().mean().item(),',
                '"completions/clipped_ratio": (length == length.max()).double().mean().item(),',
            ),
        ),
        notes="a completion cut short without its stop token (a pad) is not counted, one that stopped at the cap is",
        algorithm="grpo",
    ),
    Mutant(
        id="g54_pad_as_stop",
        bug_class=54,
        title="GRPO: a completion that ended at a pad token counted as terminated, as if it ended with the stop token",
        source="trl 1.12.0, measured (truncated only when the last id is neither EOS nor pad; docs/trl-grpo.md)",
        killed_by=("completion_lengths",),
        patch=(
            grpo_replace(
                "terminated = ((completions == cfg.stop_token_id) & completion_mask).any(dim=1)",
                "terminated = ((completions == cfg.stop_token_id) | (completions == self.pad_token_id)).any(dim=1)",
            ),
        ),
        notes="clipped_ratio too low and the terminated lengths over the pad-ended completions too; advantages and "
        "losses unchanged",
        algorithm="grpo",
    ),
)
"""Mutants of the reference GRPO trainer, killed by the GRPO gate (`--target reference-grpo`)."""

MUTANTS = MUTANTS + GRPO_MUTANTS

NOT_APPLICABLE: tuple[NotApplicable, ...] = ()
"""Every class of the table can arise in the reference trainer, so none is listed here."""


def by_id(ids: list[str] | tuple[str, ...] | None = None) -> list[Mutant]:
    """The mutants named by `ids` (all when empty); an unknown id is an error."""
    if not ids:
        return list(MUTANTS)
    known = {m.id: m for m in MUTANTS}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise KeyError(f"unknown mutant id(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[i] for i in ids]


def named_checks(mutant: Mutant) -> list[str]:
    """The check ids of verify.json that `mutant.killed_by` names (scenario names expanded), in its algorithm."""
    wanted = set(mutant.killed_by)
    checks = ALGORITHM_CHECKS[mutant.algorithm]
    return [cid for cid, (scenario, _) in checks.items() if cid in wanted or scenario in wanted]


def test_selection(mutant: Mutant) -> list[str]:
    """The check ids to run for `mutant` (`python -m harness verify --check ID ...`)."""
    return named_checks(mutant)


def patched(mutant: Mutant, root: Path) -> dict[Path, tuple[str, str]]:
    """{file: (text before, text after)} of `mutant`'s patch against the project under `root`.

    Raises PatchError when an `old` text does not occur exactly once, or when the
    patched file no longer compiles. Nothing is written.
    """
    texts: dict[Path, tuple[str, str]] = {}
    for rep in mutant.patch:
        path = root / rep.file
        if path not in texts:
            if not path.is_file():
                raise PatchError(f"{mutant.id}: {rep.file} does not exist under {root}")
            original = path.read_text(encoding="utf-8")
            texts[path] = (original, original)
        before, after = texts[path]
        found = after.count(rep.old)
        if found != 1:
            first = rep.old.strip().splitlines()[0] if rep.old.strip() else repr(rep.old)
            raise PatchError(
                f"{mutant.id}: expected the text to replace exactly once in {rep.file}, "
                f"found it {found} time(s): {first!r}"
            )
        texts[path] = (before, after.replace(rep.old, rep.new))
    for path, (_, after) in texts.items():
        try:
            compile(after, str(path), "exec")
        except SyntaxError as exc:
            raise PatchError(f"{mutant.id}: the patched {path.name} does not compile: {exc}") from None
    return texts


def apply(mutant: Mutant, root: Path) -> list[Path]:
    """Apply `mutant`'s patch to the project copy under `root`; returns the files changed."""
    texts = patched(mutant, root)
    for path, (_, after) in texts.items():
        path.write_text(after, encoding="utf-8")
    return list(texts)


def diff(mutant: Mutant, root: Path) -> str:
    """A unified diff (with the file's own line numbers) of `mutant`'s patch against the project under `root`."""
    import difflib

    out: list[str] = []
    for path, (before, after) in patched(mutant, root).items():
        name = path.relative_to(root).as_posix()
        out.extend(
            difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}", n=1
            )
        )
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def check_metadata() -> list[str]:
    """Problems with the catalogue's metadata (empty when it is complete)."""
    problems = []
    seen_ids: set[str] = set()
    covered = {m.bug_class for m in MUTANTS if m.algorithm == "ppo"} | {n.bug_class for n in NOT_APPLICABLE}
    missing = sorted(set(PPO_CLASSES) - covered)
    if missing:
        problems.append(f"bug classes without a mutant or a reason: {missing}")
    missing = sorted(set(GRPO_CLASSES) - {m.bug_class for m in MUTANTS if m.algorithm == "grpo"})
    if missing:
        problems.append(f"GRPO bug classes without a GRPO mutant: {missing}")
    for m in MUTANTS:
        if m.algorithm not in ALGORITHM_CHECKS:
            problems.append(f"{m.id}: unknown algorithm {m.algorithm!r}")
            continue
        checks = ALGORITHM_CHECKS[m.algorithm]
        scenarios = {scenario for scenario, _ in checks.values()}
        if m.id in seen_ids:
            problems.append(f"duplicate id {m.id}")
        seen_ids.add(m.id)
        for name in ("title", "source"):
            if not getattr(m, name).strip():
                problems.append(f"{m.id}: empty {name}")
        if not m.patch:
            problems.append(f"{m.id}: empty patch")
        if not m.killed_by:
            problems.append(f"{m.id}: killed_by is empty")
        for check in m.killed_by:
            if check != VERIFY_DIST and check not in checks and check not in scenarios:
                problems.append(f"{m.id}: killed_by names unknown check {check!r}")
        if m.command not in ("verify", "verify-dist"):
            problems.append(f"{m.id}: unknown command {m.command!r}")
        if m.command == "verify" and not named_checks(m):
            problems.append(f"{m.id}: names no check of the verify suite")
        if "://" in m.source:
            problems.append(f"{m.id}: source must be a URL-free reference")
    return problems
