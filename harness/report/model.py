"""The report of one verify run, typed, and its JSON form.

Schema of `verify.json`::

    {"target", "algorithm", "device", "dtype", "torch", "status", "seed",
     "checks": [{"id", "scenario", "status", "message",
                 "metrics": [{"name", "where", "logged", "expected", "abs_err", "rel_err", "tol", "scale",
                              "status", "reason", "failed", "diagnosis", "diagnosis_reason", "tol_source",
                              "precision"}],
                 "diagnoses", "contract_changes",
                 "known", "stale", "baseline_changes", "baseline_reason", "baseline_link"}],
     "verdict", "baseline": {"file", "known", "stale", "changed", "not_run", "unpinned"}}

`where` tells apart several comparisons of one metric in a check (`update 2`, a split);
`tol` is the allowed gap around `expected` (abs_tol + rel_tol * |expected|); `failed` is
false for a pass and for a not-recomputable metric the check opted out of (no scores
supplied), true otherwise. NaN, inf and None are written as null. A check's status is
"pass", "fail", "error", "skip" or "not_applicable" (the target declares it cannot run it: not run, its
`message` the declared reason); the run's is "fail" if any check failed, else "error"
if any errored or none passed (nothing was verified), else "pass". A metric's `diagnosis` and each
of a check's `diagnoses` (the known bugs the check found by itself, harness/verdict.py `Check.diagnose`)
are `{"class", "classes", "formula", "value", "gap", "source"}`.

The fields after `contract_changes` and after `checks` are there only when the run had a baseline
(`--baseline`, harness/baseline.py); every other field stays what the checks found. A check's
`known` is true for a failed check the baseline lists that fails as its entry pins, its `stale` for
a passed one, `baseline_changes` says (one line each) why a listed check that failed or errored is
not known (a metric that fails with another diagnosis or none, or is not pinned, the raise, the
problems that are no metric's, the check's own diagnoses; [] otherwise), and `baseline_reason` /
`baseline_link` are its entry's (null when it has none). `verdict` is the run's status with the
baseline applied (a known failure counts as a pass, a stale entry as a failure); `baseline` names
the file and lists the ids of the known failures, of the stale entries, of the listed checks that
failed otherwise than pinned (`changed`), of the entries whose check did not run, and of the
entries in the check-level form (`unpinned`: they pin no metric and hold any failure of their
check; `--write-baseline` rewrites them with their metrics).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.baseline import CHANGED, KNOWN, STALE, Baseline, outcome, why_not_known
from harness.verdict import CheckId, CheckResult, CheckStatus


def torch_version() -> str | None:
    """torch's installed version, read from package metadata (torch is not imported)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@dataclass
class Report:
    """The checks of one run as they come in; `config_errors` (one line each) become checks with status error."""

    target: str
    device: str
    seed: int | None = None
    dtype: str | None = None
    algorithm: str | None = None
    torch: str | None = field(default_factory=torch_version)
    checks: list[CheckResult] = field(default_factory=list)
    config_errors: list[str] = field(default_factory=list)
    baseline: Baseline | None = None
    """The known failures the run is held to, or None."""
    unconfigured: dict[str, str] = field(default_factory=dict)
    """The checks whose run could not be configured, by id, each with its configuration error's words (each also an
    error check saying why: `add_unconfigured`): the run exits 2 naming them (harness/engine.py). Not part of
    verify.json, where those checks are errors."""

    def add(self, result: CheckResult) -> CheckResult:
        """Record one check's result."""
        self.checks.append(result)
        return result

    def add_unconfigured(self, check_id: Any, said: str) -> CheckResult:
        """Record a check whose run could not be configured (`said`: why, in the configuration error's words): an
        error check, and its id among `unconfigured`."""
        from .unconfigured import not_configured

        self.unconfigured[str(check_id)] = said
        return self.add(not_configured(check_id, said))

    def all_checks(self) -> list[CheckResult]:
        """The added checks, then one error check per configuration error."""
        errors = [
            CheckResult(CheckId("configuration", (("error", i),)), CheckStatus.ERROR, problems=(line,))
            for i, line in enumerate(self.config_errors)
        ]
        return self.checks + errors

    @property
    def status(self) -> CheckStatus:
        """The run's status (see CheckStatus.overall)."""
        return CheckStatus.overall(c.status for c in self.all_checks())

    def baseline_outcome(self, check: CheckResult) -> str | None:
        """`known` for a failed check the baseline lists that fails as its entry pins, `changed` for one that fails
        otherwise or errored, `stale` for a passed one, else None (harness/baseline.py `outcome`)."""
        if self.baseline is None:
            return None
        return outcome(self.baseline.entry(str(check.id)), check)

    def known(self, check: CheckResult) -> bool:
        """True for a failed check the baseline lists that fails as its entry pins (any failure, for an entry in the
        check-level form)."""
        return self.baseline_outcome(check) == KNOWN

    def baseline_changes(self, check: CheckResult) -> list[str]:
        """Why a check the baseline lists that failed or errored is not a known failure, one line each: which metric
        changed and from what to what, a raise the entry does not pin, an error; [] for any other check."""
        if self.baseline is None:
            return []
        return why_not_known(self.baseline.entry(str(check.id)), check)

    def stale(self, check: CheckResult) -> bool:
        """True for a passed check the baseline lists (the run fails until the entry is removed)."""
        return self.baseline_outcome(check) == STALE

    def with_baseline(self, state: str) -> list[CheckResult]:
        """The checks whose baseline outcome is `state` (`known`, `stale` or `changed`), in report order."""
        return [c for c in self.all_checks() if self.baseline_outcome(c) == state]

    @property
    def verdict(self) -> CheckStatus:
        """The run's status with the baseline applied: a known failure counts as a pass, a stale entry as a fail."""
        as_judged = {KNOWN: CheckStatus.PASS, STALE: CheckStatus.FAIL}
        return CheckStatus.overall(as_judged.get(self.baseline_outcome(c), c.status) for c in self.all_checks())

    def check_dict(self, check: CheckResult) -> dict[str, Any]:
        """A check as plain data, with what the baseline made of it when there is one."""
        if self.baseline is None:
            return check.as_dict()
        entry = self.baseline.entry(str(check.id))
        return {
            **check.as_dict(),
            "known": self.known(check),
            "stale": self.stale(check),
            "baseline_changes": self.baseline_changes(check),
            "baseline_reason": entry.reason if entry else None,
            "baseline_link": entry.link if entry else None,
        }

    def baseline_dict(self, baseline: Baseline) -> dict[str, Any]:
        """The baseline's file and what it made of the run."""
        return {
            "file": baseline.path,
            "known": [str(c.id) for c in self.with_baseline(KNOWN)],
            "stale": [str(c.id) for c in self.with_baseline(STALE)],
            "changed": [str(c.id) for c in self.with_baseline(CHANGED)],
            "not_run": baseline.not_run([str(c.id) for c in self.checks]),
            "unpinned": baseline.unpinned(),
        }

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (see the module docstring for the schema)."""
        data = {
            "target": self.target,
            "algorithm": self.algorithm,
            "device": self.device,
            "dtype": self.dtype,
            "torch": self.torch,
            "status": self.status.value,
            "seed": self.seed,
            "checks": [self.check_dict(c) for c in self.all_checks()],
        }
        if self.baseline is not None:
            data.update(verdict=self.verdict.value, baseline=self.baseline_dict(self.baseline))
        return data

    def to_json(self) -> str:
        """The report as strict JSON."""
        return json.dumps(self.as_dict(), indent=2, allow_nan=False)
