"""The package's version and each registered algorithm's contract version: `python -m harness --version`.

Versions are semantic (CHANGELOG.md): before 1.0 a change that can turn a user's green CI red bumps the minor
version and comes with a migration note. A contract's version is an integer per algorithm (harness/contract.py),
raised by every change of a definition or a duty that can fail a target that passed before.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

DISTRIBUTION = "ppo-stats-harness"


def package_version() -> str:
    """This package's version: the source tree's pyproject.toml when the harness runs from one (an editable install's
    metadata keeps the version it was installed at), else the installed distribution's."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            tomllib = None
        if tomllib is not None:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
            if project.get("name") == DISTRIBUTION and "version" in project:
                return str(project["version"])
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (neither installed nor run from its source tree)"


def version_lines() -> list[str]:
    """`ppo-stats-harness X.Y.Z`, then `contract NAME N (DOCUMENT)` for each registered algorithm, the default
    first; an algorithm that cannot be loaded says why on its line."""
    from harness.algorithms import get, known_algorithms
    from harness.errors import HarnessConfigError

    lines = [f"{DISTRIBUTION} {package_version()}"]
    for name in known_algorithms():
        try:
            contract = get(name).contract
        except HarnessConfigError as exc:
            lines.append(f"contract {name} unknown: {exc}")
            continue
        lines.append(f"contract {name} {contract.version} ({contract.document})")
    return lines
