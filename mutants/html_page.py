"""reports/mutation.html: mutation.json rendered by the mutation-testing-elements web component.

The `mutation-test-report-app` component of the npm package
`mutation-testing-elements` is taken at report time from a cache outside the
repository (installed there with npm when missing) and inlined, so the page opens
offline. Without it the page is a plain table, and mutation.md says so.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
from pathlib import Path

ELEMENTS_PACKAGE = "mutation-testing-elements"
ELEMENTS_VERSION = "3"
ELEMENTS_JS = Path("node_modules") / ELEMENTS_PACKAGE / "dist" / "mutation-test-elements.js"


def cache_dir() -> Path:
    """Where the component is installed: a per-user cache outside the repository, shared by every checkout."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ppo-stats-harness" / ELEMENTS_PACKAGE


def find_elements(install: bool = True) -> tuple[str | None, str]:
    """(the component's JavaScript, where it came from or why it is missing)."""
    explicit = os.environ.get("MUTATION_TESTING_ELEMENTS_JS")
    if explicit:
        path = Path(explicit)
        if path.is_file():
            return path.read_text(encoding="utf-8"), f"{path} (MUTATION_TESTING_ELEMENTS_JS)"
        return None, f"MUTATION_TESTING_ELEMENTS_JS={explicit} does not exist"
    cache = cache_dir()
    js = cache / ELEMENTS_JS
    if not js.is_file() and install:
        npm = shutil.which("npm")
        if npm is None:
            return None, "npm is not installed, and no cached copy of mutation-testing-elements was found"
        cache.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--prefix",
                    str(cache),
                    f"{ELEMENTS_PACKAGE}@{ELEMENTS_VERSION}",
                ],
                capture_output=True,
                text=True,
                timeout=300,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return None, "npm install mutation-testing-elements timed out"
        if proc.returncode != 0:
            return None, f"npm install mutation-testing-elements failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
    if not js.is_file():
        return None, f"{js} is missing"
    version = ""
    meta = cache / "node_modules" / ELEMENTS_PACKAGE / "package.json"
    if meta.is_file():
        version = json.loads(meta.read_text(encoding="utf-8")).get("version", "")
    return js.read_text(encoding="utf-8"), f"npm {ELEMENTS_PACKAGE} {version} (cached in {cache})"


def script_safe(text: str) -> str:
    """Text that cannot close the <script> element it is inlined in."""
    return text.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def render(report: dict, js: str | None, title: str) -> str:
    """The page: the component with the report inlined, or a plain table when the component is missing."""
    data = json.dumps(report).replace("<", "\\u003c")
    if js is not None:
        return (
            '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(title)}</title>\n"
            f"<script>\n{script_safe(js)}\n</script>\n</head>\n<body>\n"
            f'<mutation-test-report-app title-postfix="{html.escape(title)}"></mutation-test-report-app>\n'
            f'<script type="application/json" id="mutation-report">{data}</script>\n'
            "<script>\n"
            "document.querySelector('mutation-test-report-app').report =\n"
            "  JSON.parse(document.getElementById('mutation-report').textContent);\n"
            "</script>\n</body>\n</html>\n"
        )
    rows = []
    for path, entry in report["files"].items():
        for m in entry["mutants"]:
            start = m["location"]["start"]
            rows.append(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(x))}</td>"
                    for x in (
                        m["id"],
                        m["status"],
                        f"{path}:{start['line']}:{start['column']}",
                        m["mutatorName"],
                        m.get("replacement", ""),
                        m.get("statusReason", ""),
                    )
                )
                + "</tr>"
            )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        "<p><strong>The mutation-testing-elements web component was not available when this page was written; "
        "this is a plain table of the same report (see mutation.md).</strong></p>\n"
        "<table>\n<tr><th>id</th><th>status</th><th>location</th><th>mutator</th><th>replacement</th><th>reason</th></tr>\n"
        + "\n".join(rows)
        + f'\n</table>\n<script type="application/json" id="mutation-report">{data}</script>\n</body>\n</html>\n'
    )
