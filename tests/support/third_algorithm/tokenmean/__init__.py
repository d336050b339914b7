"""A made-up algorithm with one metric: the token mean of what a trainer hands `masked_mean` in an update."""
