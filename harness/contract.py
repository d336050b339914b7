"""Contract versions: what each algorithm's contract is now, what changed in it and when, and what a target pins.

An algorithm declares a `Contract`: its version (an integer, raised by every change that can fail a trainer that
passed before), the document that defines it, and each change since its first version, as data: what it changed
(`subject`), the old and the new definition in a phrase each, the release of this package that shipped it (its
entry in CHANGELOG.md), and the checks it touches (patterns over check ids, `fnmatch`'s).

A target may pin the version it was written for (`factory.contract_version = 1`). When one of its checks fails,
every change it may predate that touches that check is said in one line, naming the old and the new definition
and the changelog entry: a target that pins the current version hears of none; a target that pins nothing may
have been written before any of them and hears of each. The line never changes a verdict; it says where to look.

`python -m harness --version` prints each algorithm's version. Nothing here names an algorithm.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass

from harness.verdict import CheckResult, CheckStatus

CHANGELOG = "CHANGELOG.md"
CONTRACT_VERSION = "contract_version"
"""The factory attribute by which a target pins the contract version it was written for."""


@dataclass(frozen=True)
class Change:
    """One change of a contract: a definition redefined, a setting added to it, or a new duty of a target."""

    version: int
    """The contract version that made it."""
    release: str
    """The release of this package that shipped it: its section of CHANGELOG.md."""
    subject: str
    """What changed, in a few words (`bnpo`, `loss_type cispo`, `the watched reward model`)."""
    old: str
    """What the contract said before, in a phrase ("none" for an addition)."""
    new: str
    """What it says since."""
    checks: tuple[str, ...]
    """The check ids it touches, as fnmatch patterns (`*loss_type=bnpo*`)."""

    def touches(self, check_id: str) -> bool:
        """True when the check `check_id` reads what this change changed."""
        return any(fnmatch.fnmatchcase(check_id, pattern) for pattern in self.checks)

    def line(self, algorithm: str) -> str:
        """The one line a failing check it touches carries."""
        return (f"contract change: {algorithm.upper()} contract {self.version} (release {self.release}, "
                f"{CHANGELOG}) changed {self.subject}: it was {self.old}; it is {self.new}")  # fmt: skip


@dataclass(frozen=True)
class Contract:
    """An algorithm's contract: its current version, the document that defines it, and its changes, oldest first."""

    version: int
    document: str
    """Where it is defined, relative to the repository root (docs/...)."""
    changes: tuple[Change, ...] = ()
    metrics: tuple[str, ...] = ()
    """The names of the metrics it defines, `*` standing for a name the trainer chooses (`rewards/*/mean`: one per
    reward function): what a target may declare its trainer does not log (`factory.unlogged_metrics`)."""

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ValueError(f"a contract version is a positive integer, not {self.version!r}")
        late = [c.subject for c in self.changes if not 1 < c.version <= self.version]
        if late:
            raise ValueError(f"changes outside versions 2..{self.version}: {late}")

    def knows(self, name: str) -> bool:
        """True when `name` is one of `metrics`, or a name one of its patterns stands for."""
        return name in self.metrics or any("*" in m and fnmatch.fnmatchcase(name, m) for m in self.metrics)

    def change(self, subject: str) -> Change:
        """The change of `subject` (KeyError when there is none: a diagnosis names only a change that exists)."""
        for c in self.changes:
            if c.subject == subject:
                return c
        raise KeyError(subject)

    def since(self, pinned: int | None) -> tuple[Change, ...]:
        """The changes a target written for version `pinned` may not know of (all of them when it pins none)."""
        return tuple(c for c in self.changes if pinned is None or c.version > pinned)

    def lines(self, algorithm: str, check_id: str, pinned: int | None) -> list[str]:
        """One line per change since `pinned` that touches the check `check_id`."""
        return [c.line(algorithm) for c in self.since(pinned) if c.touches(check_id)]

    def check_pin(self, pinned: object, target: str) -> int | None:
        """A target's pin, validated: None, or an int from 1 to the current version (ValueError otherwise)."""
        if pinned is None:
            return None
        if isinstance(pinned, bool) or not isinstance(pinned, int) or not 1 <= pinned <= self.version:
            raise ValueError(f"target {target!r}: `{CONTRACT_VERSION}` must be a contract version from 1 to "
                             f"{self.version} (the current one), not {pinned!r}")  # fmt: skip
        return pinned


def optimizer_step_change(version: int, release: str) -> Change:
    """The change that made an algorithm's contract hold each optimizer step to the optimizer's own update (the
    neutral check `optimizer_step`, harness/checks/optimizer.py), as version `version` of release `release`."""
    return Change(
        version=version,
        release=release,
        subject="the optimizer's step",
        old="none: the gradient a step applied was checked, the weights it made were not",
        new="each step's new weights are the optimizer's update (AdamW, Adam or SGD, in float64) of the weights and "
        "gradient it was given; weights move only in a step, and eps, weight decay and the optimizer's flags stay "
        "fixed while training",
        checks=("optimizer_step*",),
    )


def with_changes(result: CheckResult, algorithm: str, contract: Contract, pinned: int | None) -> CheckResult:
    """`result` carrying the lines of the contract's changes since `pinned` that touch it, when it failed or erred."""
    if result.status in (CheckStatus.PASS, CheckStatus.NOT_APPLICABLE):
        return result
    lines = contract.lines(algorithm, str(result.id), pinned)
    return dataclasses.replace(result, contract_changes=tuple(lines)) if lines else result
