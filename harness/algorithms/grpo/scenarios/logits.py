"""GRPO's `logit_recompute`: the loss's own log-probs and entropies against their float64 formulas from the logits
it computed them from (the target's `logit_gaps`).

The forward recompute (forward.py) holds the log-probs to the networks at LR 0; at a learning rate above 0 the
policy moves and no copy of it exists, so there the log-probs are held only to the logits the trainer itself
computed them from: a log-softmax or entropy formula that is wrong, or scaled by another temperature than the
logits', shows here at any learning rate.
"""

from __future__ import annotations

import math

from harness.compare import compare
from harness.instrument.observe import ObservationCache
from harness.scenario import Case
from harness.verdict import Check, CheckResult

from ..instruments import recorded
from ..runs import LOGITS, spec_for
from ..spec import GRPOSpec
from ..tolerances import TOLERANCES
from .preconditions import require_records


def logit_recompute(cache: ObservationCache, run: GRPOSpec, case: Case) -> CheckResult:
    """Each micro-batch's log-probs and entropies equal their float64 formulas from the loss's logits
    (the target's `logit_gaps`), at temperature 0.7 unless the run sets another."""
    check = Check(case.id)
    spec = spec_for(LOGITS, run)
    if run.temperature == GRPOSpec().temperature:
        spec = spec.with_(temperature=LOGITS.temperature)
    obs = cache.get(spec, spy=False)
    if require_records(obs, check) is None:
        return check.finish()
    worst: dict[str, tuple[float, str]] = {}
    for i, record in enumerate(recorded(obs.ran).loss_inputs):
        gaps = record.logit_gaps
        if gaps is None:
            check.fail(f"loss record {i + 1} has no logit_gaps: the target does not compare its per-token values")
            return check.finish()
        for key in ("logps", "entropies"):
            gap = getattr(gaps, key)
            if gap is None:
                check.fail(f"loss record {i + 1}: the trainer's {key} function was not called in its loss")
                return check.finish()
            gap, current = float(gap), worst.get(key)
            if current is None or math.isnan(gap) or (not math.isnan(current[0]) and gap > current[0]):
                worst[key] = (gap, f"micro-batch {i + 1}")  # a NaN stays
    for key, (gap, where) in worst.items():
        check.absorb(compare({f"logit_gap/{key}": gap}, {f"logit_gap/{key}": 0.0}, spec.dtype, TOLERANCES,
                             kind="recompute", where=where))  # fmt: skip
    return check.finish()
