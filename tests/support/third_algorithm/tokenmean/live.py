"""The made-up algorithm's live mode (`TOKENMEAN.live`): its check of a logged interval, and the demonstration
`python -m harness.live --target tokenmean-reference | tokenmean-broken` runs.

The toy trainer has no callbacks, so the demonstration trains under the spy and then hands the live session each
update's records and log in turn, as an adapter would at each log; the sampling, reports and summary are the
session's own.
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.compare import compare
from harness.instrument.spy import Spy
from harness.live.interval import IntervalResult
from harness.live.session import LiveSession
from harness.oracle.pooling import Expectation

from . import algorithm
from .tolerances import TOLERANCES


def check_interval(per_rank, logged, settings, interval, step, geometry=None) -> IntervalResult:
    """The logged token mean of one update against the float64 token mean of every value its `masked_mean` calls
    were given (`settings`: the run's dtype)."""
    wall, cpu = time.perf_counter(), time.process_time()
    calls = [r for rank in per_rank for r in rank]
    total = sum(float((c.values.double() * c.mask.double()).sum()) for c in calls)
    count = sum(float(c.mask.double().sum()) for c in calls)
    expected = {algorithm.METRIC: Expectation(algorithm.METRIC, total / count)}
    verdicts = compare({algorithm.METRIC: logged[algorithm.METRIC]}, expected, settings, TOLERANCES,
                       where=f"log {interval + 1} (step {step})")  # fmt: skip
    return IntervalResult(interval=interval, step=step, micro_batches=len(calls), ranks=len(per_rank),
                          tokens=int(count), verdicts=tuple(verdicts), seconds=time.perf_counter() - wall,
                          cpu_seconds=time.process_time() - cpu,
                          logged_names=frozenset({algorithm.METRIC}))  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.live")
    parser.add_argument("--target", choices=("tokenmean-reference", "tokenmean-broken"), required=True)
    parser.add_argument("--every", type=int, default=1)
    args = parser.parse_args(argv)
    spec = algorithm.TokenMeanSpec(updates=3)
    run = (algorithm.reference if args.target == "tokenmean-reference" else algorithm.broken)(spec)
    session = LiveSession(args.every, checks=sys.modules[__name__])
    session.arm(None, args.target)
    with Spy(run.module) as spy:
        logs = run.train()
        calls = [r for r in spy.finished() if r.fn == "masked_mean"]
    per_update = len(calls) // len(logs)
    for u, logged in enumerate(logs):
        if session.sampled(u):
            session.check(calls[u * per_update : (u + 1) * per_update], logged, spec.dtype, u, u + 1)
    summary = session.finish()
    return 1 if summary.failed else 0
