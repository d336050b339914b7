"""The verdict on a curated mutant's gate run, and the bug class the run's diagnoses point at.

Killed means exit 1 with a check the mutant names among the failures, failed for another reason than the trainer
raising, unless the mutant's bug is a raise (`raises = true`; see runner.py for every status).
"""

from __future__ import annotations

from collections import Counter

from . import catalogue
from .catalogue import Mutant
from .harness_run import RunOutcome
from .model import CuratedStatus, Judgement

DIST_RUN = "dist_run"  # verify-dist's check for the launch itself
RAISED = "the trainer raised during the run"
"""What a check's message says when the trainer raised instead of finishing its run (harness/require.py)."""


def diagnosed_classes(checks: list[dict]) -> tuple[int, ...]:
    """The classes named most often by the diagnoses of the failing metrics in `checks` (verify.json), in order; ()
    for none.

    Each class a diagnosis names counts once (a combination counts for both), so a run whose every diagnosis is one
    combination names its classes together (a tie is kept, not broken: `nansum` over the reward functions both drops
    their weights and rewards an unscorable completion 0, classes 50 and 51). The diagnoses a failed check made by
    itself (its `diagnoses`: the gradient checks' class 15) vote too.
    """
    votes: Counter[int] = Counter()
    for check in checks:
        for metric in check.get("metrics", ()):
            diagnosis = metric.get("diagnosis") if metric.get("failed") else None
            votes.update(set((diagnosis or {}).get("classes") or ()))
        if check.get("status") == "fail":
            votes.update({c for diagnosis in check.get("diagnoses") or () for c in diagnosis.get("classes") or ()})
    if not votes:
        return ()
    most = max(votes.values())
    return tuple(sorted(c for c, n in votes.items() if n == most))


def judge(mutant: Mutant, outcome: RunOutcome) -> Judgement:
    """The verdict on one mutant's run: a kill is exit 1 with a check the mutant names among the failures."""
    failed = outcome.failed
    if mutant.command == "verify-dist" and catalogue.VERIFY_DIST in mutant.killed_by:
        if DIST_RUN in failed:  # the processes themselves failed: a crash, not a kill
            return Judgement(CuratedStatus.ERROR, (), f"the two-process run failed ({DIST_RUN})")
        named = tuple(failed)
    else:
        wanted = set(catalogue.named_checks(mutant)) | set(mutant.killed_by)
        named = tuple(
            c["id"]
            for c in outcome.checks
            if c.get("status") == "fail" and (c["id"] in wanted or c.get("scenario") in wanted)
        )
    if outcome.problem:
        return Judgement(CuratedStatus.ERROR, named, outcome.problem)
    if outcome.returncode == 0:
        return Judgement(CuratedStatus.SURVIVED, named, "the verify run passed")
    if outcome.returncode == 1:
        raised = [c["id"] for c in outcome.checks if c["id"] in named and RAISED in (c.get("message") or "")]
        if named and len(raised) == len(named) and not mutant.raises:
            return Judgement(CuratedStatus.ERROR, named, f"its trainer raised in every check that names it "
                             f"({', '.join(raised)}): the diff no longer expresses the bug (or set `raises = true`)")
        if named:
            return Judgement(CuratedStatus.KILLED, named)
        if failed:
            why = f"failed: {', '.join(failed)}; named: {', '.join(mutant.killed_by)}"
            return Judgement(CuratedStatus.KILLED_BY_UNNAMED_CHECKS, named, why)
        return Judgement(CuratedStatus.ERROR, named, "exit 1 but no check failed in the report (a crash?)")
    return Judgement(
        CuratedStatus.ERROR, named, f"exit code {outcome.returncode} (2 is a usage or configuration error)"
    )
