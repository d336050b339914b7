"""The harness's configuration error (exit 2). A failed check is a CheckResult, not an exception (exit 1)."""


class HarnessConfigError(Exception):
    """The harness cannot run as asked (missing dependency, bad option); not a trainer bug."""
