"""What a live check does at each logging interval, whatever the trainer: which intervals it samples, gathering
every rank's records, the check, and its reports (a line per checked interval in the run's log, the verdict beside
the logged values for the trainer's loggers, a JSON report per checked interval, a summary at the end).

The trainer adapters (an algorithm's, e.g. GRPO's harness/algorithms/grpo/targets/live/) say when an interval starts
and when the trainer logs it, and hand over the algorithm's check of an interval (`checks`); this class never
touches the trainer or its numbers, and names no algorithm.

Live mode never harms the run it checks: no exception of the check (the gather, the oracle, the diagnosis, the
reports) leaves `check`; the interval is reported as not checked in one WARNING line and the run goes on
(`guard`). The one way a check ends a run is `raise_on_failure`, and the adapters do it through the trainer's own
control (`stop_for`).

Logs are counted from 1 everywhere the live check shows them (`log 1` is the run's first log): `first`, the
lines, the report files (`log-0001.json`) and their contents.
"""

from __future__ import annotations

import contextlib
import json
import logging
import operator
import os
import sys
import tempfile
from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import HarnessConfigError

from .interval import IntervalResult, Summary, failing, verdict_line
from .ranks import Unsendable, gather_records, rank_and_world

logger = logging.getLogger("harness.live")


class LiveConfigError(HarnessConfigError, ValueError):
    """A live check asked for what it cannot do (a bad option, a report folder it cannot write), raised when it is
    created: before the run, never during it."""


class LiveCheckFailed(AssertionError):
    """A failing interval, raised by `raise_if_failed()` after the run (never inside the trainer's loop)."""

    def __init__(self, result: IntervalResult, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.result = result


# ---------------------------------------------------------------- the run's log, seen without configuring logging


class _Fallback(logging.Handler):
    """Writes the live check's lines to stderr when no handler of the user's would: the script configured no
    logging (no handler on `harness.live`'s ancestors). Once one is configured it stays silent, so a line is never
    printed twice."""

    def emit(self, record: logging.LogRecord) -> None:
        if _configured():
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # a closed stderr must not reach the trainer
            self.handleError(record)


def _configured() -> bool:
    """Whether a handler other than the fallback would take `harness.live`'s records (the user's logging)."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(not isinstance(h, _Fallback) for h in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def make_visible() -> None:
    """Make the live check's lines visible in a script that configures no logging: a fallback handler to stderr on
    `harness.live` (once per process), and the logger at INFO (its pass lines are INFO) unless the script set its
    level or configured logging (then its own levels decide, as for any library)."""
    if not any(isinstance(h, _Fallback) for h in logger.handlers):
        handler = _Fallback()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET and not _configured():
        logger.setLevel(logging.INFO)


# ---------------------------------------------------------------- options


def _count(name: str, value: Any, least: int) -> int:
    """An integer option of at least `least` (not a bool, not a float), or LiveConfigError naming it."""
    if isinstance(value, bool):
        raise LiveConfigError(f"live check: {name}={value!r} must be an integer >= {least}, not a bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise LiveConfigError(f"live check: {name}={value!r} must be an integer >= {least}") from None
    if number < least:
        raise LiveConfigError(f"live check: {name}={number} must be at least {least}")
    return int(number)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise LiveConfigError(f"live check: {name}={value!r} must be True or False")
    return value


def writable_dir(name: str, value: Any) -> Path | None:
    """`value` as a folder the live check can write its reports to, created now (with its parents) and written to
    once (a file made and removed): LiveConfigError naming the option and the reason when it cannot be."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise LiveConfigError(f"live check: {name}={value!r} must be a folder path (str or PathLike) or None")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise LiveConfigError(f"live check: {name}={os.fspath(value)!r} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".live-check-", suffix=".tmp"):
            pass
    except OSError as why:
        raise LiveConfigError(f"live check: {name}={os.fspath(value)!r} cannot be written to: "
                              f"{why.strerror or why}") from None  # fmt: skip
    return path


# ---------------------------------------------------------------- the session


class LiveSession:
    """The sampling, checking and reporting of one training run's live check.

    `every`: check one logging interval in `every`: the logs `first`, `first + every`, ... (counted from 1).
    `report_dir`: where each checked interval's JSON report goes (`log-0007.json`) and `summary.json` (None: no
    files); it is created and test-written here. `raise_on_failure`: end the run after a failing interval, through
    the trainer's own control (the adapters ask `stop_for`). `log_expected`: add the verdict (`live/<name>_expected`,
    `_gap`, `_pass`, `live/pass`) to the trainer's logs of a checked interval. `max_intervals`: stop checking after
    this many intervals. `checks`: the algorithm's check of an interval, an object (its module) whose
    `check_interval(per_rank, logged, settings, interval, step, geometry)` returns an `IntervalResult`; without one
    (None) each sampled interval is reported as not checked. Every option is validated here
    (LiveConfigError, a ValueError, naming it).
    """

    def __init__(
        self,
        every: int = 20,
        *,
        first: int = 1,
        report_dir: str | os.PathLike | None = None,
        raise_on_failure: bool = False,
        log_expected: bool = True,
        max_intervals: int | None = None,
        checks: Any = None,
    ) -> None:
        self.checks = checks
        self.every = _count("every", every, 1)
        self.first = _count("first", first, 1)
        self.raise_on_failure = _flag("raise_on_failure", raise_on_failure)
        self.log_expected = _flag("log_expected", log_expected)
        self.max_intervals = None if max_intervals is None else _count("max_intervals", max_intervals, 1)
        self.report_dir = writable_dir("report_dir", report_dir)
        self.summary = Summary()
        self.results: list[IntervalResult] = []
        self._reporting = self.report_dir is not None
        make_visible()

    # -- the schedule ---------------------------------------------------------

    def sampled(self, interval: int) -> bool:
        """Whether the logging interval of index `interval` (0-based: log `interval + 1`) is checked."""
        if self.max_intervals is not None and self.summary.checked + len(self.summary.unchecked_logs) >= \
                self.max_intervals:  # fmt: skip
            return False
        log = interval + 1
        return log >= self.first and (log - self.first) % self.every == 0

    def schedule(self) -> str:
        """`logs 1, 21, 41, ...` (at most `max_intervals` of them)."""
        logs = [self.first + i * self.every for i in range(3 if self.max_intervals is None else
                                                              min(3, self.max_intervals))]  # fmt: skip
        more = ", ..." if self.max_intervals is None or self.max_intervals > 3 else ""
        cap = f", at most {self.max_intervals}" if self.max_intervals is not None else ""
        return f"log{'s' if len(logs) > 1 else ''} {', '.join(map(str, logs))}{more}{cap}"

    def arm(self, settings: Any, what: str = "") -> None:
        """The run's one line saying the live check is on: what it checks, at which precision, where it reports."""
        if not self._main():
            return
        judged = "judged at the run's precision"
        if settings is not None:
            judged = f"judged at {settings.dtype} precision (the policy's; each tolerance from its recorded terms)"
        reports = "no report files (report_dir=None)"
        if self.report_dir is not None:
            reports = f"reports to {self.report_dir}"
        on_failure = "; stops the run at a failing interval (raise_on_failure)" if self.raise_on_failure else ""
        logger.info(f"live check armed{' on ' + what if what else ''}: one logging interval in {self.every} "
                    f"({self.schedule()}), {judged}; {reports}{on_failure}")  # fmt: skip

    # -- one interval -----------------------------------------------------------

    @contextlib.contextmanager
    def guard(self, interval: int, step: int | None, what: str, counted: bool = True) -> Iterator[None]:
        """Run the live check's own work for log `interval + 1`; an exception of it does not leave: one WARNING line
        says which log could not be checked and why, and the run goes on. `counted=False` for work after the
        check (the interval counts as checked)."""
        try:
            yield
        except Exception as why:  # noqa: BLE001 - live mode never harms the run it checks
            self.not_checked(interval, step, f"{what}: {type(why).__name__}: {why}", counted)

    def not_checked(self, interval: int, step: int | None, why: str, counted: bool = True) -> None:
        """Log `interval + 1` was sampled but could not be checked: one WARNING line, the main rank's (every rank
        reaches it alike: a rank's own failure travels to the others in the gather). `counted=False`: it was
        checked, only something after the check failed."""
        if counted:
            self.summary.unchecked(interval + 1)
        at = f" (step {step})" if step is not None else ""
        what = "not checked" if counted else "checked, but"
        logger.log(logging.WARNING if self._main() else logging.DEBUG,
                   f"live check log {interval + 1}{at}: {what} ({why}); the run goes on")  # fmt: skip

    def check(
        self,
        records: Sequence[Any],
        logged: MutableMapping[str, Any],
        settings: Any,
        interval: int,
        step: int,
        history: MutableMapping[str, Any] | None = None,
        geometry: Any = None,
        unusable: str = "",
    ) -> IntervalResult | None:
        """Check this rank's `records` of one interval, pooled with every other rank's, against `logged`; report
        it. The verdict is added to `logged` (and to `history`, the trainer's kept copy, when given). None, with
        one WARNING line, when the check could not be made; it never raises. `unusable`: why this rank's records
        are not the interval's (its recording failed): every rank then skips the interval alike."""
        result = None
        with self.guard(interval, step, "the check"):
            per_rank = gather_records(Unsendable(unusable) if unusable else records)
            if self.checks is None:
                raise LiveConfigError("no check of an interval was given (checks=None)")
            result = self.checks.check_interval(per_rank, logged, settings, interval, step, geometry)
        if result is None:
            return None
        self.results.append(result)
        self.summary.add(result)
        with self.guard(interval, step, "the report", counted=False):
            if self.log_expected:
                extra = result.dashboard()
                logged.update(extra)
                if history is not None:
                    history.update(extra)
            self._report(result)
        return result

    def stop_for(self, result: IntervalResult | None) -> bool:
        """Whether the run should end after this interval (`raise_on_failure` and a failing interval); says so in
        one ERROR line. The adapter ends the run through the trainer's own control."""
        if result is None or not result.failed or not self.raise_on_failure:
            return False
        self.summary.stopped_at_log = result.log
        if self._main():
            logger.error(f"live check log {result.log} (step {result.step}) failed: ending the run after this step "
                         "(raise_on_failure=True)")  # fmt: skip
        return True

    @property
    def failed(self) -> bool:
        """Whether a checked interval failed."""
        return self.summary.failed > 0

    def raise_if_failed(self) -> None:
        """Raise `LiveCheckFailed` for the first failing interval, if any (after `train()`: for a script or CI that
        should end with an error)."""
        for result in self.results:
            if result.failed:
                raise LiveCheckFailed(result, self.lines(result))

    def _main(self) -> bool:
        return rank_and_world()[0] == 0

    def _report(self, result: IntervalResult) -> None:
        if not self._main():
            return
        lines = self.lines(result)
        level = logging.WARNING if result.failed else logging.INFO
        for line in lines:
            logger.log(level, line)
        self._write(f"log-{result.log:04d}.json", result.as_dict(), result.interval, result.step)

    def _write(self, name: str, data: dict[str, Any], interval: int | None, step: int | None) -> None:
        """One JSON report into `report_dir`; when that fails, one WARNING line and no more report files this run
        (the checks and their lines go on)."""
        if not self._reporting or self.report_dir is None:
            return
        path = self.report_dir / name
        try:
            self.report_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        except OSError as why:
            self._reporting = False
            at = f" log {interval + 1} (step {step})" if interval is not None else ""
            logger.warning(f"live check{at}: report not written to {path} ({type(why).__name__}: "
                           f"{why.strerror or why}); no more report files this run, the checks go on")  # fmt: skip

    @staticmethod
    def lines(result: IntervalResult) -> list[str]:
        """What the run's log says of one checked interval: one line, and one per failing metric."""
        head = (f"live check log {result.log} (step {result.step}): "
                f"{'FAIL' if result.failed else 'pass'}, {len(result.verdicts)} metric(s) over "
                f"{result.micro_batches} micro-batch(es), {result.tokens} tokens, {result.ranks} rank(s); "
                f"check cost {result.cpu_seconds * 1e3:.1f} ms CPU")  # fmt: skip
        if result.not_checked:
            head += f"; not checked: {', '.join(result.not_checked)}"
        lines = [head]
        if result.problem:
            lines.append(f"FAIL live log {result.log}: records unusable: {result.problem}")
        lines += [verdict_line(v) for v in failing(result)]
        return lines

    def finish(self) -> Summary:
        """Log the summary (and write summary.json); the summary. It never raises."""
        with contextlib.suppress(Exception):
            if self._main():
                line = self.summary.line()
                logger.log(logging.WARNING if self.summary.failed else logging.INFO, line)
                data = {**self.summary.as_dict(), "logs": [r.log for r in self.results]}
                self._write("summary.json", data, None, None)
        return self.summary
