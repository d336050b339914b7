"""GRPO's oracle: what a correct trainer logs and computes, recomputed in float64 from the recorded tensors.

records (whether a loss record can be recomputed), settings (the trainer settings the formulas take), expect (the
pooled statistics of an interval), entropy_mask and off_policy_mask (the tokens whose policy term the loss
keeps), rewards and reward_model (rewards and advantages), lengths (the length statistics), gradients and
token_gradients (the gradient at the log-probs, per token), entropy_bonus and adaptive_entropy (the gradient at the
entropies, each window's coefficient), vespo (vespo's weight). Nothing here imports a trainer, a target or a
scenario.
"""
