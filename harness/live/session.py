"""What a live check does at each logging interval, whatever the trainer: which intervals it samples, gathering
every rank's records, the check, and its reports (a warning in the run's log, `live/<name>_expected` beside the
logged values, a JSON report per checked interval, a summary at the end).

The trainer adapters (trl.py, reference.py) say when an interval starts and when the trainer logs it; this
class never touches the trainer or its numbers.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

from harness.algorithms.grpo.expect import Settings
from harness.algorithms.grpo.live import (
    Geometry,
    IntervalResult,
    Summary,
    check_interval,
    expected_key,
    failing,
    verdict_line,
)
from harness.instrument.loss import LossRecord

logger = logging.getLogger("harness.live")


class LiveCheckFailed(AssertionError):
    """Raised at a failing interval when the live check was asked to raise (`raise_on_failure=True`)."""

    def __init__(self, result: IntervalResult, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.result = result


def _world() -> tuple[int, int]:
    """(rank, world size) of the process group, (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_records(records: Sequence[LossRecord]) -> list[list[LossRecord]]:
    """Every rank's records of the interval, in rank order (all ranks call this at the same log)."""
    import torch.distributed as dist

    rank, world = _world()
    if world == 1:
        return [list(records)]
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, list(records))
    return [list(r) for r in everyone]


class LiveSession:
    """The sampling, checking and reporting of one training run's live check.

    `every`: check one logging interval in `every` (the intervals 0, every, 2 * every, ... counted from `first`).
    `report_dir`: where each checked interval's JSON report goes (`interval-0007.json`) and `summary.json`
    (None: no files). `raise_on_failure`: raise `LiveCheckFailed` at a failing interval, after reporting it.
    `log_expected`: add `live/<name>_expected` to the trainer's logs of a checked interval.
    """

    def __init__(
        self,
        every: int = 20,
        *,
        first: int = 0,
        report_dir: str | os.PathLike | None = None,
        raise_on_failure: bool = False,
        log_expected: bool = True,
        max_intervals: int | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"every={every}: check one interval in every (at least 1)")
        self.every, self.first = int(every), int(first)
        self.report_dir = Path(report_dir) if report_dir is not None else None
        self.raise_on_failure, self.log_expected = raise_on_failure, log_expected
        self.max_intervals = max_intervals
        self.summary = Summary()
        self.results: list[IntervalResult] = []

    def sampled(self, interval: int) -> bool:
        """Whether logging interval `interval` (0-based) is checked."""
        if self.max_intervals is not None and self.summary.checked >= self.max_intervals:
            return False
        return interval >= self.first and (interval - self.first) % self.every == 0

    def check(
        self,
        records: Sequence[LossRecord],
        logged: MutableMapping[str, Any],
        settings: Settings,
        interval: int,
        step: int,
        history: MutableMapping[str, Any] | None = None,
        geometry: Geometry | None = None,
    ) -> IntervalResult:
        """Check this rank's `records` of one interval, pooled with every other rank's, against `logged`; report
        it. The expected values are added to `logged` (and to `history`, the trainer's kept copy, when given)."""
        per_rank = gather_records(records)
        result = check_interval(per_rank, logged, settings, interval, step, geometry)
        self.results.append(result)
        self.summary.add(result)
        if self.log_expected:
            extra = {expected_key(name): value for name, value in result.expected.items()}
            logged.update(extra)
            if history is not None:
                history.update(extra)
        self._report(result)
        return result

    def _main(self) -> bool:
        return _world()[0] == 0

    def _report(self, result: IntervalResult) -> None:
        lines = self.lines(result)
        if self._main():
            level = logging.WARNING if result.failed else logging.INFO
            for line in lines:
                logger.log(level, line)
            if self.report_dir is not None:
                self.report_dir.mkdir(parents=True, exist_ok=True)
                path = self.report_dir / f"interval-{result.interval:04d}.json"
                path.write_text(json.dumps(result.as_dict(), indent=2) + "\n", encoding="utf-8")
        if result.failed and self.raise_on_failure:
            raise LiveCheckFailed(result, lines)

    @staticmethod
    def lines(result: IntervalResult) -> list[str]:
        """What the run's log says of one checked interval: one line, and one per failing metric."""
        head = (f"live check log {result.interval + 1} (step {result.step}): "
                f"{'FAIL' if result.failed else 'pass'}, {len(result.verdicts)} metric(s) over "
                f"{result.micro_batches} micro-batch(es), {result.tokens} tokens, {result.ranks} rank(s); "
                f"check cost {result.cpu_seconds * 1e3:.1f} ms CPU")  # fmt: skip
        if result.not_checked:
            head += f"; not checked: {', '.join(result.not_checked)}"
        lines = [head]
        if result.problem:
            lines.append(f"FAIL live log {result.interval + 1}: records unusable: {result.problem}")
        lines += [verdict_line(v) for v in failing(result)]
        return lines

    def finish(self) -> Summary:
        """Log the summary (and write summary.json); the summary."""
        if self._main():
            line = self.summary.line()
            logger.log(logging.WARNING if self.summary.failed else logging.INFO, line)
            if self.report_dir is not None:
                self.report_dir.mkdir(parents=True, exist_ok=True)
                data = {**self.summary.as_dict(), "intervals": [r.interval for r in self.results]}
                (self.report_dir / "summary.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return self.summary
