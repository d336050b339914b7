"""The words of a check whose run could not be configured, one for every command that runs checks (`verify`,
`verify-dist`): the check's own error, and the one line that ends the run naming every such check (exit 2)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.verdict import CheckResult, CheckStatus


def configuration_problem(said: str) -> str:
    """The line a check whose run could not be configured says, from the configuration error's own words."""
    return f"configuration error: {said}"


def not_configured(check_id: Any, said: str) -> CheckResult:
    """The result of a check whose run could not be configured: an error saying why."""
    return CheckResult(check_id, CheckStatus.ERROR, problems=(configuration_problem(said),))


def unconfigured_line(check_ids: Iterable[str]) -> str:
    """The one line that ends a run some of whose checks could not be configured: which, and how a target that
    cannot run a check declares it."""
    ids = list(check_ids)
    count = f"{len(ids)} check{'s' if len(ids) != 1 else ''}"
    return (
        f"{count} could not be configured: {', '.join(ids)}; a target that cannot run a check declares it "
        'not applicable, with its reason: factory.not_applicable = {"<check id, pattern or KEY=VALUE>": "<reason>"} '
        "(docs/using-the-gate.md)"
    )
