"""Reports of a verify run: the typed `Report` (model.py), and one renderer per format.

`verify.json` for machines (model.py), `verify.md` for a pull request (markdown.py), both written by
files.py; the terminal table and one-line failures (terminal.py); every surface's failure lines
(format.py, with `assert_passed`, how a test fails with a check); a baseline file written from a run
(baseline_file.py); verify.xml, JUnit (junit.py). The model imports no renderer. Nothing here imports torch.
"""

from .files import JSON_NAME, MARKDOWN_NAME, write_report
from .format import CheckFailed, assert_passed, check_failure_lines
from .model import Report

__all__ = [
    "JSON_NAME",
    "MARKDOWN_NAME",
    "CheckFailed",
    "Report",
    "assert_passed",
    "check_failure_lines",
    "write_report",
]
