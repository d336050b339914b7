"""Hypothesis profiles, and the order pytest-xdist hands the modules out in.

Hypothesis: `ci` (derandomized, no deadline, no example database) is loaded when CI is set.

`nox -s tests` runs the suite on every CPU (pytest-xdist, `-n auto`). Its workers take tests in collection
order, so the modules that cost the most start first and the cheap ones fill in behind them (a module's tests
stay together and in their order: its module-scoped fixtures are made once). The costs are those measured in
docs/development.md ("The test suite's time"); a module not listed keeps its place after them.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

COSTLY_FIRST = (
    "test_mutants.py",  # the curated catalogue: about 75 gate processes, 2 at a time
    "test_precision.py",
    "test_trl_verdict.py",
    "test_trl_grpo_verdict.py",
    "test_grpo_trainer.py",
    "test_gate.py",
    "test_dist.py",
)
"""Modules by what they cost, the costliest first."""


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(COSTLY_FIRST)}
    order = {}
    for item in items:
        order.setdefault(item.path, len(order))

    def key(item):
        return (rank.get(item.path.name, len(rank)), order[item.path])

    items.sort(key=key)  # stable: each module's tests keep their order
