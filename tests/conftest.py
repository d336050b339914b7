"""Hypothesis profiles: `ci` (derandomized, no deadline, no example database) is loaded when CI is set."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
