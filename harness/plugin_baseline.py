"""The pytest plugin's side of a baseline (harness/baseline.py): a test's report as the run's `Report` judges the
checks it recorded, and the baseline a run writes."""

from __future__ import annotations

import pytest

WROTE = pytest.StashKey[str]()
"""What `write_baseline` did, for the terminal summary."""


def apply_baseline(rep: pytest.TestReport, call: pytest.CallInfo, recorded: list, report) -> None:
    """A test's call report as the run's `report` (harness/report/model.py) judges the checks it recorded: expected
    failure, or failed for a stale entry, or as it was.

    A failed test is an expected failure only when it failed with a check (`CheckFailed`, raised by
    `harness.report.assert_passed`) that is a known failure (`report.known`) and every check it recorded that did not
    pass is known: a test that recorded a new failure, or failed for anything else, stays failed. A passed test that
    recorded a passed check the baseline lists (a stale entry) fails.
    """
    from .report.format import CheckFailed

    if rep.failed and call.excinfo is not None:
        failed = [check for check in recorded if not check.passed]
        raised = call.excinfo.value
        if isinstance(raised, CheckFailed) and report.known(raised.result) and all(report.known(c) for c in failed):
            reasons = "; ".join(report.baseline.entry(str(c.id)).reason for c in failed)
            rep.outcome, rep.wasxfail = "skipped", f"known failure (baseline: {reasons})"
    elif rep.passed:
        stale = [check for check in recorded if report.stale(check)]
        if stale:
            from .report.terminal import stale_text

            rep.outcome = "failed"
            rep.longrepr = "\n".join(f"{c.id} {stale_text(report, c)}" for c in stale)


def write_baseline(config: pytest.Config, report, errors: list[str]) -> None:
    """--ppo-write-baseline: the run's failed checks as a baseline file, unless the run (or one of its checks) could
    not be configured or ran no check; what was done is said in the terminal summary, a file that cannot be written
    is an error."""
    from .report.baseline_file import write

    path = config.option.ppo_write_baseline
    if errors or report is None or report.config_errors or report.unconfigured:
        why = "no check ran" if report is None and not errors else "the run had a configuration error"
        config.stash[WROTE] = f"baseline {path} not written: {why}"
        return
    try:
        count = write(path, report)
    except OSError as exc:
        errors.append(f"cannot write the baseline {path}: {exc}")
    else:
        config.stash[WROTE] = f"wrote baseline {path}: {count} failed check(s)"
