"""Reports of a verify run: the typed `Report` (model.py), and one renderer per format.

`verify.json` for machines (model.py), `verify.md` for a pull request (markdown.py), both written by
files.py; the terminal table and one-line failures (terminal.py); every surface's failure lines
(format.py); a baseline file written from a run (baseline_file.py). JUnit XML comes from pytest. The
model imports no renderer. Nothing here imports torch.
"""

from .files import JSON_NAME, MARKDOWN_NAME, write_report
from .format import check_failure_lines
from .model import Report

__all__ = ["JSON_NAME", "MARKDOWN_NAME", "Report", "check_failure_lines", "write_report"]
