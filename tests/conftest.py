"""Hypothesis profiles, the order pytest-xdist hands the modules out in, and the suite's allocator setting.

Hypothesis: `ci` (derandomized, no deadline, no example database) is loaded when CI is set.

`nox -s tests` runs the suite on every CPU (pytest-xdist, `-n auto --dist loadfile`). Its workers take whole
modules in collection order (pytest_configure turns off xdist's reordering of modules by their number of
tests), so the modules that cost the most start first and the cheap ones fill in behind them (a module's tests
stay together and in their order: its module-scoped fixtures are made once). The costs are those measured in
docs/development.md ("The test suite's time"); a module not listed keeps its place after them.
"""

import os

from hypothesis import settings

from tests.support.forked import NO_ALLOCATOR_THREAD

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

os.environ.update(NO_ALLOCATOR_THREAD)  # before any gate server starts: every run's environment is the server's

COSTLY_FIRST = (
    "test_curated_ppo.py",  # the curated catalogue, one algorithm's half on each worker: about 45 gates each
    "test_curated_grpo.py",
    "test_example_session.py",  # a fresh venv and both example projects' gates and tests
    "test_trl_newest.py",  # TRL 1.16.0's whole GRPO gate and its baseline's runs
    "test_ppo_precision.py",
    "test_trl_verdict.py",
    "test_trl_grpo_verdict.py",
    "test_grpo_trainer.py",
    "test_ppo_gate.py",
    "test_dist.py",
    "test_contract_versions.py",  # release 0.1.0's GRPO target through today's gate
)
"""Modules by what they cost, the costliest first."""


def pytest_configure(config):
    # pytest-xdist reorders whole modules by their number of tests unless told not to (its default
    # `--loadscope-reorder`), which hands the one-test modules that cost minutes out last: keep this order
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(COSTLY_FIRST)}
    order = {}
    for item in items:
        order.setdefault(item.path, len(order))

    def key(item):
        return (rank.get(item.path.name, len(rank)), order[item.path])

    items.sort(key=key)  # stable: each module's tests keep their order
