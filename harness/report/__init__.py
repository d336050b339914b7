"""Reports of a verify run: the typed `Report` (model.py), and one renderer per format.

`verify.json` for machines (model.py), `verify.md` for a pull request (markdown.py), the
terminal table and one-line failures (terminal.py). JUnit XML comes from pytest. Nothing
here imports torch.
"""

from .model import JSON_NAME, MARKDOWN_NAME, Report

__all__ = ["JSON_NAME", "MARKDOWN_NAME", "Report"]
