"""Checks of the rollout and of the gradient that are no one algorithm's contract, written once.

`forward`: the log-probs a trainer used against float64 forwards of its own networks on the tokens it
sampled; `sampling`: the drawn tokens against the distribution its rollout log-probs describe;
`rank_sampling`: verify-dist's ranks' drawn completions against each other (a random stream of each
rank's own). An algorithm's scenario hands them what its records carry (PPO's: the spy's rollout and
micro-batch records); nothing here names an algorithm or imports one.
"""
