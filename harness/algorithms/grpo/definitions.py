"""The GRPO definitions a target may declare (harness/definitions.py): the vocabulary, and its two profiles.

`trl` is TRL's GRPOTrainer, the contract of docs/grpo-metrics.md and the default: a target that declares nothing
is held to it. `verl` is verl's, where it defines an entry otherwise. docs/definitions.md lists each entry with its
formula and sources; the entries are few today, and each is read by the oracle where its formula is. The oracle's
`Settings` (oracle/settings.py) carry the entries of `IN_THE_SETTINGS` under the same names; its window weights
(oracle/gradients.py, `WindowWeights`) carry `token_mean_scope`; its pooled kl and policy_loss (oracle/expect.py)
read `metric_pooling`; its token terms (oracle/terms.py) take the entropies of the pass `entropy_pass` names.
`cispo_clip_population` is read by cispo's token flags (oracle/terms.py), `truncation` by the length statistics
(oracle/lengths.py). `logging_cadence` is read by the judge,
not the oracle: the pooled checks cut a run into the intervals it declares it logs (scenarios/preconditions.py,
`per_cadence`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.definitions import Definition, Profile, Vocabulary
from harness.errors import HarnessConfigError

ADVANTAGE_EPSILON = "advantage_epsilon"
PARTIAL_LAST_INTERVAL = "partial_last_interval"
KL_CLAMP = "kl_clamp"
KL_IMPORTANCE_WEIGHTING = "kl_importance_weighting"
DUAL_CLIP_RATIO = "dual_clip_ratio"
TOKEN_MEAN_SCOPE = "token_mean_scope"
POLICY_LOSS_INCLUDES_KL = "policy_loss_includes_kl"
METRIC_POOLING = "metric_pooling"
KL_POPULATION = "kl_population"
ENTROPY_PASS = "entropy_pass"
LOGGING_CADENCE = "logging_cadence"
CISPO_CLIP_POPULATION = "cispo_clip_population"
TRUNCATION = "truncation"
LOGGED, OPTIONAL = "logged", "optional"
AS_CONFIGURED, NEVER = "as_configured", "never"
GENERATION, WINDOW = "generation", "window"
INTERVAL, WINDOW_MEAN = "interval", "window_mean"
TOKEN_MEAN, AS_LOSS = "token_mean", "as_loss"
UPDATE, BEFORE_UPDATE = "update", "before_update"
CONFIGURED = "configured"
POSITIVE_ADVANTAGE, ANY_ADVANTAGE = "positive_advantage", "any_advantage"
NO_STOP, AT_LIMIT = "no_stop", "at_limit"
IN_THE_LOSS = (KL_CLAMP, KL_IMPORTANCE_WEIGHTING, DUAL_CLIP_RATIO)
"""The entries the per-token loss and its gradient read (the oracle's `Settings` fields of the same names)."""
OF_THE_KL = (*IN_THE_LOSS, METRIC_POOLING, KL_POPULATION)
"""The entries the pooled kl reads: the loss's, how it pools its interval's windows, and how it weighs its tokens."""
OF_THE_POLICY_LOSS = (*IN_THE_LOSS, POLICY_LOSS_INCLUDES_KL, METRIC_POOLING)
"""The entries the pooled policy_loss reads: the loss's, whether it holds the KL term, how it is pooled."""
OF_THE_ENTROPY = (ENTROPY_PASS,)
"""The entries the pooled entropy reads: which forward pass's entropies it pools."""
OF_THE_CISPO_CLIP = (CISPO_CLIP_POPULATION,)
"""The entries the pooled cispo_clip_ratio reads: which capped tokens it counts."""
IN_THE_SETTINGS = tuple(dict.fromkeys((*OF_THE_KL, *OF_THE_POLICY_LOSS, *OF_THE_ENTROPY, *OF_THE_CISPO_CLIP)))
"""The entries the oracle's `Settings` carry: those of the pooled kl, policy_loss, entropy and cispo_clip_ratio."""
TOKEN_MEAN_LOSS_TYPES = ("dapo", "cispo", "vespo")
"""The loss types whose window loss is a token sum over a token count, the count `token_mean_scope` says."""


@dataclass(frozen=True)
class Bound(Definition):
    """A definition that takes None (the bound is not applied) or a finite number above `above`."""

    above: float = 0.0

    def check(self, value: Any) -> Any:
        if value is None:
            return None
        try:
            number = super().check(value)
        except HarnessConfigError:
            number = None
        if number is None or number <= self.above:
            raise HarnessConfigError(f"definition {self.name!r} takes None or a finite number above {self.above:g}, "
                                     f"got {value!r}")  # fmt: skip
        return number


@dataclass(frozen=True)
class Flag(Definition):
    """A definition that takes True or False."""

    kind: tuple[Any, ...] = (True, False)

    def check(self, value: Any) -> Any:
        if not isinstance(value, bool):
            raise HarnessConfigError(f"definition {self.name!r} takes True or False, got {value!r}")
        return value


VOCABULARY = Vocabulary(
    definitions=(
        Definition(
            ADVANTAGE_EPSILON,
            "the constant added to the reward std an advantage is divided by",
            "A_i = (r_i - mean of its group) / (std + advantage_epsilon)",
        ),
        Definition(
            PARTIAL_LAST_INTERVAL,
            "whether a partial last logging interval (max_steps not a multiple of logging_steps) is logged",
            "logs == ceil(max_steps / logging_steps) ('logged'); or floor(...) or ceil(...) ('optional')",
            (LOGGED, OPTIONAL),
        ),
        Bound(
            KL_CLAMP,
            "the bound the per-token KL estimate k3 is clamped at (None: not clamped)",
            "k3_t = min(exp(ref - logp) - (ref - logp) - 1, kl_clamp): no gradient where k3 is above the clamp",
        ),
        Definition(
            KL_IMPORTANCE_WEIGHTING,
            "whether the per-token KL term is multiplied by the importance ratio",
            "kl_t = r'_t k3_t where use_bias_correction_kl is set ('as_configured'); kl_t = k3_t ('never')",
            (AS_CONFIGURED, NEVER),
        ),
        Bound(
            DUAL_CLIP_RATIO,
            "the dual clip's bound on the ratio of a token whose advantage is negative (None: no dual clip)",
            "where A < 0: l_t = min(-A c, -min(r A, clip(r) A)), c = dual_clip_ratio: no policy gradient where r > c",
            above=1.0,
        ),
        Definition(
            TOKEN_MEAN_SCOPE,
            "the tokens a token-mean loss (dapo, cispo, vespo) divides an optimizer step's summed loss by",
            "weight_t = 1 / (tokens of t's generation batch * micro-batches of the window / steps_per_generation) "
            "('generation'); 1 / tokens of t's window, the optimizer step's micro-batches on every rank ('window')",
            (GENERATION, WINDOW),
        ),
        Flag(
            POLICY_LOSS_INCLUDES_KL,
            "whether the logged policy_loss holds the KL term of the loss",
            "policy_loss pools l_t = policy term + beta kl_t (True); the policy term alone (False)",
        ),
        Definition(
            METRIC_POOLING,
            "how the logged kl and policy_loss pool an interval's optimizer steps",
            "the metric's aggregate over every token of the interval ('interval'); the mean over the interval's "
            "optimizer windows of each window's own aggregate, the window's micro-batches on every rank "
            "('window_mean')",
            (INTERVAL, WINDOW_MEAN),
        ),
        Definition(
            KL_POPULATION,
            "how the logged kl weighs its tokens",
            "kl = the token mean of kl_t ('token_mean'); the loss type's aggregate of kl_t, as its policy_loss "
            "aggregates l_t ('as_loss'; bnpo's a token mean)",
            (TOKEN_MEAN, AS_LOSS),
        ),
        Definition(
            ENTROPY_PASS,
            "the forward pass whose per-token entropies the logged entropy pools",
            "entropy = the token mean of H_t from the update's own forward, the loss's logits ('update'); from the "
            "pass that computed the generation's old log-probs, before its first optimizer step ('before_update')",
            (UPDATE, BEFORE_UPDATE),
        ),
        Definition(
            LOGGING_CADENCE,
            "how many optimizer steps one log covers",
            "one log every logging_steps optimizer steps ('configured'); one log per generation, its "
            "steps_per_generation / gradient_accumulation_steps * num_iterations optimizer steps ('generation')",
            (CONFIGURED, GENERATION),
        ),
        Definition(
            CISPO_CLIP_POPULATION,
            "the tokens cispo's logged clip fraction counts as clipped",
            "cispo_clip_ratio = the token mean of [r_t > epsilon_high and A_t > 0] ('positive_advantage'); of "
            "[r_t > epsilon_high], whatever A_t's sign ('any_advantage')",
            (POSITIVE_ADVANTAGE, ANY_ADVANTAGE),
        ),
        Definition(
            TRUNCATION,
            "the completions the logged clipped ratio counts as truncated",
            "completions/clipped_ratio = the share of completions without the stop token in their mask ('no_stop'); "
            "of those of max_completion_length tokens, one that ends with the stop token at the limit included "
            "('at_limit')",
            (NO_STOP, AT_LIMIT),
        ),
    ),
    profiles=(
        Profile("trl", {ADVANTAGE_EPSILON: 1e-4, PARTIAL_LAST_INTERVAL: OPTIONAL, KL_CLAMP: None,
                        KL_IMPORTANCE_WEIGHTING: AS_CONFIGURED, DUAL_CLIP_RATIO: None, TOKEN_MEAN_SCOPE: GENERATION,
                        POLICY_LOSS_INCLUDES_KL: True, METRIC_POOLING: INTERVAL,
                        KL_POPULATION: TOKEN_MEAN, ENTROPY_PASS: UPDATE, LOGGING_CADENCE: CONFIGURED,
                        CISPO_CLIP_POPULATION: POSITIVE_ADVANTAGE, TRUNCATION: NO_STOP},
                {ADVANTAGE_EPSILON: "TRL GRPOTrainer, _generate_and_score_completions: advantages / (std_rewards "
                 "+ 1e-4)",
                 PARTIAL_LAST_INTERVAL: "transformers' Trainer, which TRL's GRPOTrainer logs through: "
                 "DefaultFlowCallback asks for a log when global_step is a multiple of logging_steps, so a partial "
                 "last interval's metrics are never an interval's log",
                 KL_CLAMP: "TRL GRPOTrainer, _compute_loss: per_token_kl = exp(ref - logp) - (ref - logp) - 1, "
                 "not clamped",
                 KL_IMPORTANCE_WEIGHTING: "TRL GRPOTrainer, _compute_loss: per_token_kl * coef_1 when "
                 "args.use_bias_correction_kl",
                 DUAL_CLIP_RATIO: "TRL GRPOTrainer, _compute_loss: -min(coef_1 A, coef_2 A), no third bound",
                 TOKEN_MEAN_SCOPE: "TRL GRPOTrainer, _compute_loss: (per_token_loss * mask).sum() / "
                 "(num_items_in_batch / num_processes * current_gradient_accumulation_steps / steps_per_generation), "
                 "num_items_in_batch the generation batch's tokens on every process "
                 "(_generate_and_score_completions)",
                 POLICY_LOSS_INCLUDES_KL: "TRL GRPOTrainer, _compute_loss: per_token_loss + beta * per_token_kl, "
                 "then the loss type's aggregate, policy_loss = loss.detach() (logged with an entropy bonus)",
                 METRIC_POOLING: "the contract, docs/grpo-metrics.md sections 2 and 4: one aggregate over the whole "
                 "interval (TRL GRPOTrainer itself logs a flat mean of micro-batch means, class 16, a finding: "
                 "docs/trl-grpo.md)",
                 KL_POPULATION: "TRL GRPOTrainer, _compute_loss: _metrics['kl'] gets global_masked_mean(per_token_kl),"
                 " (per_token_kl * mask).sum() / mask.sum() over every process, whatever the loss type",
                 ENTROPY_PASS: "TRL GRPOTrainer, _compute_loss: _metrics['entropy'] gets "
                 "global_masked_mean(entropies), the entropies _get_per_token_logps_and_entropies(..., "
                 "compute_entropy=True) returns on the loss's own forward",
                 LOGGING_CADENCE: "transformers' Trainer, which TRL's GRPOTrainer logs through: DefaultFlowCallback "
                 "sets should_log when global_step % logging_steps == 0 (TrainingArguments.logging_steps)",
                 CISPO_CLIP_POPULATION: "TRL GRPOTrainer, _compute_loss: is_cispo_clipped = (coef_1 > epsilon_high) "
                 "& (advantages > 0), _metrics['cispo_clip_ratio'] its global_masked_mean",
                 TRUNCATION: "TRL GRPOTrainer, _generate_and_score_completions: is_truncated = the last id neither "
                 "an EOS nor the pad, _metrics['completions/clipped_ratio'] its mean over every process"}),
        Profile("verl", {ADVANTAGE_EPSILON: 1e-6, PARTIAL_LAST_INTERVAL: LOGGED, KL_CLAMP: 10.0,
                         KL_IMPORTANCE_WEIGHTING: NEVER, DUAL_CLIP_RATIO: 3.0, TOKEN_MEAN_SCOPE: WINDOW,
                         POLICY_LOSS_INCLUDES_KL: False, METRIC_POOLING: WINDOW_MEAN,
                         KL_POPULATION: AS_LOSS, ENTROPY_PASS: BEFORE_UPDATE, LOGGING_CADENCE: GENERATION,
                         CISPO_CLIP_POPULATION: ANY_ADVANTAGE, TRUNCATION: AT_LIMIT},
                {ADVANTAGE_EPSILON: "verl, trainer/ppo/core_algos.py, compute_grpo_outcome_advantage(..., "
                 "epsilon=1e-6): scores / (std + epsilon)",
                 PARTIAL_LAST_INTERVAL: "verl's trainer logs the metrics of every training step: no step is left "
                 "out of a log",
                 KL_CLAMP: "verl, trainer/ppo/core_algos.py, kl_penalty_forward(..., 'low_var_kl'): "
                 "torch.clamp(kld, min=-10, max=10)",
                 KL_IMPORTANCE_WEIGHTING: "verl, workers/utils/losses.py, ppo_loss: agg_loss of kl_penalty(log_prob, "
                 "ref_log_prob, kl_loss_type) times kl_loss_coef, no ratio",
                 DUAL_CLIP_RATIO: "verl, trainer/ppo/core_algos.py, compute_policy_loss_vanilla: clip_ratio_c "
                 "(default 3.0) bounds the loss of A < 0 at -A clip_ratio_c",
                 TOKEN_MEAN_SCOPE: "verl, trainer/ppo/core_algos.py, agg_loss('token-mean'): masked_sum(loss) / "
                 "batch_num_tokens * dp_size, batch_num_tokens the mini-batch's tokens on every rank "
                 "(workers/engine/fsdp/transformer_impl.py, forward_backward_batch), one mini-batch per optimizer "
                 "step (workers/engine_workers.py, TrainingWorker.train_mini_batch)",
                 POLICY_LOSS_INCLUDES_KL: "verl, workers/utils/losses.py, ppo_loss: metrics['actor/pg_loss'] is the "
                 "policy loss function's pg_loss; the KL term is added to policy_loss after it and logged as "
                 "kl_loss",
                 METRIC_POOLING: "verl, workers/engine_workers.py, TrainingWorker.train_mini_batch: each mini-batch's "
                 "kl_loss and pg_loss, a SUM Metric of its micro-batches' agg_loss shares (workers/utils/losses.py, "
                 "ppo_loss; utils/metric/utils.py, Metric.aggregate_dp), appended per mini-batch; reduce_metrics "
                 "logs their np.mean once per training step",
                 KL_POPULATION: "verl, workers/utils/losses.py, ppo_loss: kl_loss = agg_loss(kl_penalty(...), "
                 "response_mask, config.loss_agg_mode, **global_batch_info), the loss's own aggregation "
                 "(trainer/ppo/core_algos.py, agg_loss)",
                 ENTROPY_PASS: "verl, trainer/ppo/ray_trainer.py, RayPPOTrainer.fit: actor/entropy is agg_loss of "
                 "the entropys _compute_old_log_prob returns (compute_log_prob with calculate_entropy=True), once "
                 "per training step before _update_actor; the update computes none unless entropy_coeff != 0",
                 LOGGING_CADENCE: "verl, trainer/ppo/ray_trainer.py, RayPPOTrainer.fit: logger.log(data=metrics, "
                 "step=self.global_steps) once per training step, one batch of the dataloader (a generation) and "
                 "its ppo_epochs passes of mini-batches (_update_actor); no option logs within it",
                 CISPO_CLIP_POPULATION: "verl, trainer/ppo/core_algos.py, compute_policy_loss_cispo: actor/pg_clipfrac "
                 "= masked_mean(ratio != clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)), every token whose "
                 "importance weight the clamp moved, whatever the advantage's sign (the weight multiplies A of "
                 "either sign)",
                 TRUNCATION: "verl, trainer/ppo/metric_utils.py, compute_data_metrics: response_length/clip_ratio = "
                 "mean(response_length == max_response_length), a completion that ends with the stop token at the "
                 "limit included"}),
    ),  # fmt: skip
    default="trl",
)
