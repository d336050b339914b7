"""Targets of a trainer that has no vespo: the reference GRPO target, refusing `loss_type=vespo` with a configuration
error inside the checks that run it (as a trainer written before the loss type does), without and with declaring
those checks not applicable, and with a declaration that names no check (a typo)."""

from __future__ import annotations

from harness.errors import HarnessConfigError

REASON = "this trainer has no vespo loss"


def refusing(spec):
    """The reference GRPO run of `spec`; a HarnessConfigError for vespo."""
    from harness.targets import resolve

    if spec.loss_type == "vespo":
        raise HarnessConfigError("no-vespo target: loss_type='vespo' is not a loss type of this trainer")
    return resolve("reference-grpo").factory(spec)


refusing.algorithm = "grpo"


def declaring(spec):
    """`refusing`, declaring the vespo checks not applicable."""
    return refusing(spec)


declaring.algorithm = "grpo"
declaring.not_applicable = {"loss_type=vespo": REASON}


def misspelt(spec):
    """`refusing`, declaring a loss type the gate has no check of."""
    return refusing(spec)


misspelt.algorithm = "grpo"
misspelt.not_applicable = {"loss_type=vespa": REASON}
