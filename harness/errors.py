"""The harness's exceptions. A failed check is a `verdict.CheckResult`, never an exception (exit 1)."""


class HarnessConfigError(Exception):
    """The harness cannot run as asked (missing dependency, bad option, bad target): exit 2, not a trainer bug."""


class NotRecomputable(Exception):
    """The records do not determine a value (ambiguous rows, a site never called); the message says why."""


class ContractViolation(Exception):
    """The trainer did what the contract rules out, as an instrument saw it while the trainer ran (e.g. it handed
    a spied function tensors of impossible shapes): the run fails every check that reads it (exit 1), naming it."""
