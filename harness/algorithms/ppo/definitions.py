"""The PPO definitions a target may declare (harness/definitions.py): the vocabulary, and its two profiles.

`trl` is TRL's PPOTrainer (1.12.0), the contract of docs/metrics.md and the default: a target that declares nothing
is held to it. `verl` is verl's, where it defines an entry otherwise. docs/definitions.md lists each entry with its
formula and sources; each is read where its formula is checked.
"""

from __future__ import annotations

from harness.definitions import Definition, Profile, Vocabulary

MINIBATCH_PERMUTATION = "minibatch_permutation"
PER_EPOCH, FIXED = "per_epoch", "fixed"

VOCABULARY = Vocabulary(
    definitions=(
        Definition(
            MINIBATCH_PERMUTATION,
            "how each epoch of an update cuts the rollout into minibatches",
            "each epoch trains on every rollout row once, in minibatches of a fresh random permutation ('per_epoch') "
            "or in the same minibatches every epoch ('fixed')",
            (PER_EPOCH, FIXED),
        ),
    ),
    profiles=(
        Profile("trl", {MINIBATCH_PERMUTATION: PER_EPOCH},
                {MINIBATCH_PERMUTATION: "TRL 1.12.0, trl/experimental/ppo/ppo_trainer.py, PPOTrainer.train: "
                 "`for ppo_epoch_idx in range(args.num_ppo_epochs): b_inds = "
                 "np.random.permutation(args.local_batch_size)`"}),
        Profile("verl", {MINIBATCH_PERMUTATION: FIXED},
                {MINIBATCH_PERMUTATION: "verl 0.9.1, trainer/config/actor/actor.yaml `shuffle: false`; "
                 "workers/engine_workers.py TrainingWorker.train_mini_batch iterates utils/tensordict_utils.py "
                 "make_iterator, a torch DataLoader over the batch's rows with the actor's `shuffle`, every epoch: "
                 "unshuffled, the same mini-batches in the same order"}),
    ),  # fmt: skip
    default="trl",
)
