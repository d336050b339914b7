"""The pytest plugin's side of a baseline (harness/baseline.py): a check test's report as the baseline has it, the
baseline a run writes, and the entries a target's declarations rule out."""

from __future__ import annotations

import pytest

WROTE = pytest.StashKey[str]()
"""What `write_baseline` did, for the terminal summary."""


def not_applicable_entries(baseline, target) -> list[str]:
    """The checks `baseline` lists that `target` declares not applicable (a baseline holds failures, and a check that
    is not run cannot fail), in the file's order."""
    from .algorithms import cases

    ids = {str(c.id): c.id for c in cases(target.algorithm)}
    return [e.check for e in baseline.entries if target.not_applicable_reason(ids[e.check]) is not None]


def apply_baseline(rep: pytest.TestReport, call: pytest.CallInfo, recorded: list, collector) -> None:
    """A test's call report as the baseline has it: expected failure, or failed for a stale entry, or as it was.

    A failed test is an expected failure only when every check it recorded that did not pass is a known
    failure and it failed with one of those checks' failure lines first (`pytest.fail` or an assert's message):
    a test that failed for anything else, or recorded a new failure, stays failed. A passed test that
    recorded a passed check the baseline lists (a stale entry) fails.
    """
    if rep.failed and call.excinfo is not None:
        failed = [check for check in recorded if not check.passed]
        said = [line.strip() for line in str(call.excinfo.value).splitlines()]
        if (
            failed
            and all(collector.known(c) for c in failed)
            and any(lines and said[: len(lines)] == lines for lines in map(lines_of, failed))
        ):
            reasons = "; ".join(collector.baseline.entry(str(c.id)).reason for c in failed)
            rep.outcome, rep.wasxfail = "skipped", f"known failure (baseline: {reasons})"
    elif rep.passed:
        stale = [check for check in recorded if collector.stale(check)]
        if stale:
            from .report.terminal import stale_text

            rep.outcome = "failed"
            rep.longrepr = "\n".join(f"{c.id} {stale_text(collector, c)}" for c in stale)


def lines_of(check) -> list[str]:
    """A check's failure lines (harness/report/format.py, what suite/test_verify.py fails with), each stripped (an
    assert's message comes back with its lines indented)."""
    from .report.format import check_failure_lines

    return [line.strip() for line in check_failure_lines(check)]


def write_baseline(config: pytest.Config, report, errors: list[str]) -> None:
    """--ppo-write-baseline: the run's failed checks as a baseline file, unless the run (or one of its checks) could
    not be configured or ran no check; what was done is said in the terminal summary, a file that cannot be written
    is an error."""
    from .report.baseline_file import write

    path = config.option.ppo_write_baseline
    if errors or report is None:
        why = "the run had a configuration error" if errors else "no check ran"
        config.stash[WROTE] = f"baseline {path} not written: {why}"
        return
    try:
        count = write(path, report)
    except OSError as exc:
        errors.append(f"cannot write the baseline {path}: {exc}")
    else:
        config.stash[WROTE] = f"wrote baseline {path}: {count} failed check(s)"
