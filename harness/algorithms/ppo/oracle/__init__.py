"""PPO's oracle: what a correct trainer logs and computes, recomputed in float64 from the recorded tensors.

expect (the pooled statistics of an update), parts (a statistic's numerators and counts), scores and returns
(rewards, the KL penalty, GAE), values and value_signal (the value model's targets and loss), signal (the
policy's per-token loss and clip), gradients, value_gradients and decomposition (the gradient at the log-probs
and values, and a step's as its micro-batches'). Nothing here imports a trainer, a target or a scenario.
"""
