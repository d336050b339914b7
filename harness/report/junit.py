"""verify.xml: a run's report as JUnit XML, the form CI systems read test results in.

One `<testsuite name="ppo-verify">` with one `<testcase>` per check, named `test_check[<check id>]` under the class
`harness.suite.test_verify` (the names the gate's pytest adapter gives the same checks, so a CI that keys on them
reads either): a passed check is an empty test case; a failed or errored check (and a stale baseline entry) a
`<failure>` whose message is its first failure line and whose text is every failure line (harness/report/format.py),
after, for a check the baseline lists that fails otherwise than its entry pins, what changed;
a known failure `<skipped type="pytest.xfail">` with its entry's reason; a check the target declares not applicable
`<skipped type="pytest.skip">` with the declared reason; each configuration error of the run an `<error>` test case
of its own.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.verdict import CheckStatus

from .format import check_failure_lines
from .model import Report

XML_NAME = "verify.xml"
SUITE_NAME = "ppo-verify"
CLASS_NAME = "harness.suite.test_verify"


def junit_tree(report: Report, seconds: dict[str, float] | None = None) -> ET.ElementTree:
    """The report as JUnit XML; `seconds` (check id -> time) gives each test case its time."""
    from .terminal import stale_text

    seconds = seconds or {}
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name=SUITE_NAME)
    tally = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for check in report.checks:
        case = ET.SubElement(suite, "testcase", classname=CLASS_NAME, name=f"test_check[{check.id}]",
                             time=f"{seconds.get(str(check.id), 0.0):.3f}")  # fmt: skip
        tally["tests"] += 1
        if report.known(check):
            entry = report.baseline.entry(str(check.id))
            ET.SubElement(case, "skipped", type="pytest.xfail", message=f"known failure (baseline: {entry.reason})")
            tally["skipped"] += 1
        elif report.stale(check):
            said = f"{check.id} {stale_text(report, check)}"
            ET.SubElement(case, "failure", message=said).text = said
            tally["failures"] += 1
        elif check.status is CheckStatus.NOT_APPLICABLE:
            ET.SubElement(case, "skipped", type="pytest.skip", message=f"not applicable: {check.message}")
            tally["skipped"] += 1
        elif check.status is CheckStatus.SKIP:
            ET.SubElement(case, "skipped", type="pytest.skip", message=check.message)
            tally["skipped"] += 1
        elif not check.passed:
            # a check the baseline lists that fails otherwise than it pins says first what changed
            changed = [f"not as the baseline knows it: {line}" for line in report.baseline_changes(check)]
            lines = changed + check_failure_lines(check)
            ET.SubElement(case, "failure", message=lines[0] if lines else check.message).text = "\n".join(lines)
            tally["failures"] += 1
    for number, line in enumerate(report.config_errors):
        case = ET.SubElement(suite, "testcase", classname=CLASS_NAME, name=f"configuration[error={number}]", time="0")
        ET.SubElement(case, "error", message=f"configuration error: {line}")
        tally["tests"] += 1
        tally["errors"] += 1
    for key, count in tally.items():
        suite.set(key, str(count))
    suite.set("time", f"{sum(seconds.values()):.3f}")
    return ET.ElementTree(suites)


def write_junit(report: Report, directory: str | os.PathLike[str], seconds: dict[str, float] | None = None) -> Path:
    """Write verify.xml under `directory` (made if missing); return its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / XML_NAME
    tree = junit_tree(report, seconds)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path
