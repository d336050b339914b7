"""The GRPO definitions a target may declare (harness/definitions.py): the vocabulary, and its two profiles.

`trl` is TRL's GRPOTrainer, the contract of docs/grpo-metrics.md and the default: a target that declares nothing
is held to it. `verl` is verl's, where it defines an entry otherwise. docs/definitions.md lists each entry with its
formula and sources; the entries are few today, and each is read by the oracle where its formula is.
"""

from __future__ import annotations

from harness.definitions import Definition, Profile, Vocabulary

ADVANTAGE_EPSILON = "advantage_epsilon"
PARTIAL_LAST_INTERVAL = "partial_last_interval"
LOGGED, OPTIONAL = "logged", "optional"

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
    ),
    profiles=(
        Profile("trl", {ADVANTAGE_EPSILON: 1e-4, PARTIAL_LAST_INTERVAL: OPTIONAL},
                {ADVANTAGE_EPSILON: "TRL GRPOTrainer, _generate_and_score_completions: advantages / (std_rewards "
                 "+ 1e-4)",
                 PARTIAL_LAST_INTERVAL: "transformers' Trainer, which TRL's GRPOTrainer logs through: "
                 "DefaultFlowCallback asks for a log when global_step is a multiple of logging_steps, so a partial "
                 "last interval's metrics are never an interval's log"}),
        Profile("verl", {ADVANTAGE_EPSILON: 1e-6, PARTIAL_LAST_INTERVAL: LOGGED},
                {ADVANTAGE_EPSILON: "verl, trainer/ppo/core_algos.py, compute_grpo_outcome_advantage(..., "
                 "epsilon=1e-6): scores / (std + epsilon)",
                 PARTIAL_LAST_INTERVAL: "verl's trainer logs the metrics of every training step: no step is left "
                 "out of a log"}),
    ),  # fmt: skip
    default="trl",
)
