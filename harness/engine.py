"""The gate's run loop in plain Python: `run_gate(options) -> Report`, with no test framework.

`python -m harness verify` (harness/cli.py), the pytest plugin (harness/plugin.py, an adapter for holding a trainer
to the gate from one's own suite), the curated mutants and the tests all run checks through a `Gate`:

- `Gate(options)` validates the configuration once (harness/preflight.py: the target, its algorithm, `--set`, the
  check ids, the baseline file and what it lists, the device): a HarnessConfigError of one line, before any check;
- `gate.run(case)` runs one check into the gate's `Report`: a check the target declares not applicable is recorded
  so, with its reason, and not run; a check whose run could not be configured (the trainer refused a setting of its
  scenario) is an error saying why, with the contract's changes that touch it, and the others still run;
- `gate.finish()` is the report: a run in which nothing was verified (every selected check not applicable) says so
  as a configuration error.

The baseline is applied to the `Report` (`Report.known`, `Report.stale`, harness/baseline.py), never to a failure
message; `exit_code(report)` is the run's: 0 pass, 1 a check failed (a new failure or a stale baseline entry), 2 a
configuration error (one check's included, or nothing verified). Importing this module imports neither pytest nor
torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import HarnessConfigError
from .report.model import Report
from .report.unconfigured import unconfigured_line
from .verdict import CheckResult, CheckStatus


@dataclass(frozen=True)
class GateOptions:
    """What one gate run is asked for (the options of `python -m harness verify`)."""

    target: str = "reference"
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    checks: tuple[str, ...] = ()
    """Check ids to run (none: every check of the target's algorithm)."""
    settings: tuple[str, ...] = ()
    """KEY=VALUE trainer settings for the whole gate."""
    baseline: str | None = None
    """A baseline file of known failures (harness/baseline.py)."""
    keyword: str | None = None
    """`-k EXPRESSION`: only the checks whose ids it selects (harness/select.py)."""


class Gate:
    """One configured gate run: the resolved target, its algorithm, the run-wide spec, the observation cache and the
    report the checks go into."""

    def __init__(self, options: GateOptions, cache: Any = None) -> None:
        """Validate `options` (HarnessConfigError, one line, for the first thing wrong). `cache`: an
        `ObservationCache` of the target's factory to share runs with (a fresh one by default)."""
        from .preflight import preflight

        self.options = options
        configured = preflight(options.target, options.seed, options.device, options.dtype, options.settings,
                               options.checks, build=False, baseline=options.baseline)  # fmt: skip
        self.target, self.algorithm, self.run_spec = configured.target, configured.algorithm, configured.run_spec
        baseline = None
        if options.baseline is not None:
            from .baseline import load

            baseline = load(options.baseline, self.algorithm.name, options.target)
            declared = not_applicable_entries(baseline, self.target)
            if declared:
                raise HarnessConfigError(
                    f"baseline {options.baseline}: check {declared[0]!r} is one target {options.target!r} declares "
                    "not applicable, so it never runs: remove its entry"
                )
        if options.device.startswith("cuda"):
            import torch

            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        if cache is None:
            from .instrument.observe import ObservationCache

            cache = ObservationCache(self.target.factory, self.target)
        self.cache = cache
        self.report = Report(target=options.target, device=options.device, seed=options.seed, dtype=options.dtype,
                             algorithm=self.algorithm.name, baseline=baseline)  # fmt: skip
        self._selected = self._select()
        if not self._selected:
            raise HarnessConfigError(f"-k {options.keyword!r} selects none of the {self.algorithm.name} checks "
                                     f"(`python -m harness checks --target {options.target}` lists them)")  # fmt: skip

    def cases(self) -> list:
        """The selected cases of the target's algorithm, in the algorithm's order (selected once, when the gate is
        made)."""
        return list(self._selected)

    def _select(self) -> list:
        from .algorithms import cases
        from .select import keyword_matcher

        wanted = set(self.options.checks)
        chosen = [c for c in cases(self.algorithm.name) if not wanted or str(c.id) in wanted]
        if self.options.keyword is not None:
            selects = keyword_matcher(self.options.keyword)
            chosen = [c for c in chosen if selects(str(c.id))]
        return chosen

    def build(self) -> None:
        """Build the target's run for the run-wide spec once and check it fits the algorithm (harness/preflight.py
        `built`): a HarnessConfigError names a factory of another algorithm before any check trains it."""
        from .preflight import built

        built(self.target.factory, self.run_spec, self.algorithm, self.options.target)

    def run(self, case: Any) -> CheckResult:
        """Run one case into the report and return its result (see the module docstring)."""
        reason = self.target.not_applicable_reason(case.id)
        if reason is not None:
            return self.report.add(CheckResult(case.id, CheckStatus.NOT_APPLICABLE, notes=(reason,)))
        try:
            result = self.annotated(case.run(self.cache, self.run_spec))
        except HarnessConfigError as exc:
            said = str(exc) + self.changed_under(case.id)
            return self.report.add_unconfigured(case.id, said)
        return self.report.add(result)

    def annotated(self, result: CheckResult) -> CheckResult:
        """A failed check's result with the lines of the contract's changes that touch it since the version the
        target pins (every change when it pins none; harness/contract.py)."""
        from .contract import with_changes

        return with_changes(result, self.algorithm.name, self.algorithm.contract, self.target.contract_version)

    def changed_under(self, check_id: Any) -> str:
        """' (in CHECK; <each contract change that touches it since the version the target pins>)', so that a target
        written before a change that its run cannot be configured for hears which one; '' for none."""
        lines = self.algorithm.contract.lines(self.algorithm.name, str(check_id), self.target.contract_version)
        return f" (in {check_id}; {'; '.join(lines)})" if lines else ""

    def finish(self) -> Report:
        """The report, with 'nothing was verified' as a configuration error when no selected check ran."""
        report = self.report
        ran = any(c.status in (CheckStatus.PASS, CheckStatus.FAIL) for c in report.checks)
        if report.checks and not ran and not report.unconfigured and not report.config_errors:
            report.config_errors.append(
                f"nothing was verified: none of the {len(report.checks)} selected checks ran (each is not "
                "applicable to this target or was skipped)"
            )
        return report


def run_gate(options: GateOptions, cache: Any = None, on_result: Callable[[CheckResult], None] | None = None) -> Report:
    """Every selected check of `options.target` into one `Report` (HarnessConfigError, one line, when the run cannot
    be configured at all); `on_result` hears each result as it comes."""
    gate = Gate(options, cache)
    gate.build()
    for case in gate.cases():
        result = gate.run(case)
        if on_result is not None:
            on_result(result)
    return gate.finish()


def exit_code(report: Report) -> int:
    """0 when every check passed or is a known failure, 1 for a failed check (new, errored, or a stale baseline
    entry), 2 when the run or one of its checks could not be configured, or nothing was verified."""
    if report.config_errors or report.unconfigured:
        return 2
    return 0 if report.verdict is CheckStatus.PASS else 1


def error_lines(report: Report) -> list[str]:
    """What ends a run's verdict in the terminal: each configuration error, then the line naming the checks whose
    run could not be configured."""
    return [*report.config_errors, *([unconfigured_line(report.unconfigured)] if report.unconfigured else [])]


def not_applicable_entries(baseline: Any, target: Any) -> list[str]:
    """The checks `baseline` lists that `target` declares not applicable (a baseline holds failures, and a check that
    is not run cannot fail), in the file's order."""
    from .algorithms import cases

    ids = {str(c.id): c.id for c in cases(target.algorithm)}
    return [e.check for e in baseline.entries if target.not_applicable_reason(ids[e.check]) is not None]
