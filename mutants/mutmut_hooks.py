"""The pytest plugin of mutmut's runs: copied into the scratch project as `ppo_mutmut_hooks.py`.

`python -m mutants mutmut` copies this file, alone, next to the scratch copy of the
project, and `[tool.mutmut] pytest_add_cli_args` loads it with `-p ppo_mutmut_hooks`.
It is therefore self-contained: it imports nothing of the `mutants` package, which
is not copied. It only acts when mutmut runs the suite (MUTANT_UNDER_TEST is set):

- a Hypothesis profile (`derandomize`, no database, no deadline, the
  `differing_executors` health check suppressed) is loaded, so a mutant's verdict
  never depends on an example database or on mutmut's forked executors;
- while mutmut collects its per-test statistics (MUTANT_UNDER_TEST=stats), the
  harness's session-wide observation cache is emptied before each test, so each
  test really calls the trainer functions it checks. Without that, a test that
  only reads another test's cached run (freshness, rollout_objectives) would be
  linked to no function and mutmut would never run it against a mutant.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings


def _under_mutmut() -> bool:
    """Whether mutmut runs this pytest session: outside it the plugin must change nothing."""
    return "MUTANT_UNDER_TEST" in os.environ


def pytest_configure(config) -> None:
    """Load a deterministic Hypothesis profile, so that a verdict never depends on a database or an executor."""
    if not _under_mutmut():
        return
    settings.register_profile(
        "ppo-mutmut",
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.differing_executors],
    )
    settings.load_profile("ppo-mutmut")


@pytest.fixture(autouse=True)
def _ppo_fresh_observations_while_mutmut_collects_stats(request):
    """Empty the harness's observation cache before each test of mutmut's stats run."""
    if os.environ.get("MUTANT_UNDER_TEST") == "stats" and "ppo_cache" in request.fixturenames:
        request.getfixturevalue("ppo_cache").clear()
    yield
