"""The files of a run's report: verify.json (the model's JSON) and verify.md (its Markdown rendering)."""

from __future__ import annotations

import os
from pathlib import Path

from .markdown import render_markdown
from .model import Report

JSON_NAME = "verify.json"
MARKDOWN_NAME = "verify.md"


def write_report(report: Report, directory: str | os.PathLike[str] = "reports", step_summary: bool = True) -> Path:
    """Write verify.json and verify.md under `directory`; append the Markdown to $GITHUB_STEP_SUMMARY when it is set
    and `step_summary`; return the JSON path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / JSON_NAME
    json_path.write_text(report.to_json() + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (out / MARKDOWN_NAME).write_text(markdown, encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and step_summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
    return json_path
