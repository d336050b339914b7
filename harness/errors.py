"""Exceptions shared by the harness: configuration problems (exit 2) and failed checks (exit 1)."""


class HarnessConfigError(Exception):
    """The harness cannot run as asked (missing dependency, bad option); not a trainer bug."""


class CheckFailed(AssertionError):
    """A metric or invariant of the trainer under test does not match the oracle."""
