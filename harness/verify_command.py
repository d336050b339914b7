"""`python -m harness verify` (and `ppo-verify`): the gate in one process, through the engine (harness/engine.py).

The configuration is validated once (one line on stderr, a verify.json saying so, exit 2); then each check runs,
one character of progress each (`.` pass, `F` fail, `E` error, `x` known failure, `n` not applicable); then the
reports (verify.json, verify.md, verify.xml), the verdict (harness/report/terminal.py), each configuration error,
what `--write-baseline` did, and a last line counting the outcomes. The exit code is `engine.exit_code`'s.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from .errors import HarnessConfigError


def verify(args: argparse.Namespace, extra: list[str]) -> int:
    """Run the gate as `args` say; `extra` (arguments the command does not know) is a usage error."""
    from .engine import Gate, GateOptions, error_lines, exit_code
    from .heap import frozen
    from .report import write_report
    from .report.junit import write_junit
    from .report.terminal import render_terminal

    if extra:
        print(f"error: verify does not take {' '.join(extra)} (`python -m harness verify --help` lists what it "
              "takes; `-k` and `--check` select checks)", file=sys.stderr)  # fmt: skip
        return 2
    options = GateOptions(target=args.target, seed=args.seed, device=args.device, dtype=args.dtype,
                          checks=tuple(args.check), settings=tuple(args.settings), baseline=args.baseline,
                          keyword=args.keyword)  # fmt: skip
    started = time.perf_counter()
    # what the imports left (torch, transformers) frozen before anything is built, and what building the target
    # imported before its checks run: the collections of the checks' runs skip both (harness/heap.py)
    with frozen():
        try:
            gate = Gate(options)
            gate.build()
        except HarnessConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            write_config_error(args, str(exc))
            return 2
        settings = "".join(f" {s}" for s in args.settings)
        print(f"ppo-stats-harness: target={args.target} seed={args.seed} device={args.device} dtype={args.dtype}"
              + settings, flush=True)  # fmt: skip
        progress = Progress()
        with frozen():  # and what building the target imported: its trainer's library (TRL's modules, say)
            for case in gate.cases():
                progress(gate.run(case))
        progress.end()
        report = gate.finish()
    wrote = write_baseline(args.write_baseline, report) if args.write_baseline else None
    write_report(report, args.report_dir)  # also appends the Markdown to $GITHUB_STEP_SUMMARY when set
    write_junit(report, args.report_dir, progress.seconds)
    print(render_terminal(report, verbose=args.verbose))
    for line in error_lines(report):
        print(f"CONFIG ERROR {line}")
    if wrote:
        print(wrote)
    print(f"{tally(report)} in {time.perf_counter() - started:.2f}s")
    return exit_code(report)


class Progress:
    """One character per check as it comes, and each check's seconds (for verify.xml)."""

    MARKS = {"pass": ".", "fail": "F", "error": "E", "skip": "s", "not_applicable": "n"}

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.last = time.perf_counter()
        self.count = 0

    def __call__(self, result) -> None:
        now = time.perf_counter()
        self.seconds[str(result.id)] = now - self.last
        self.last = now
        self.count += 1
        print(self.MARKS.get(result.status.value, "?"), end="", flush=True)

    def end(self) -> None:
        if self.count:
            print(flush=True)


def tally(report) -> str:
    """`1 failed, 44 passed, 2 not applicable, 18 xfailed, 1 error`: the checks by outcome, the baseline applied (a
    known failure is xfailed, a stale entry failed), in the order pytest's last line has them."""
    from .verdict import CheckStatus

    word = {CheckStatus.FAIL: "failed", CheckStatus.ERROR: "error", CheckStatus.PASS: "passed",
            CheckStatus.NOT_APPLICABLE: "not applicable", CheckStatus.SKIP: "skipped"}  # fmt: skip
    outcome = Counter()
    for check in report.checks:
        if report.known(check):
            outcome["xfailed"] += 1
        elif report.stale(check):
            outcome["failed"] += 1
        else:
            outcome[word[CheckStatus(check.status)]] += 1
    outcome["error"] += len(report.config_errors)
    words = [(n, w) for w in ("failed", "passed", "skipped", "not applicable", "xfailed", "error") if (n := outcome[w])]
    return ", ".join(f"{n} {w}{'s' if w == 'error' and n != 1 else ''}" for n, w in words) or "no checks ran"


def write_baseline(path: str, report) -> str:
    """--write-baseline: the run's failed checks as a baseline file, unless the run (or one of its checks) could not
    be configured; what was done, in one line (a file that cannot be written is a configuration error)."""
    from .report.baseline_file import write

    if report.config_errors or report.unconfigured:
        return f"baseline {path} not written: the run had a configuration error"
    try:
        count = write(path, report)
    except OSError as exc:
        report.config_errors.append(f"cannot write the baseline {path}: {exc}")
        return f"baseline {path} not written"
    return f"wrote baseline {path}: {count} failed check(s)"


def write_config_error(args: argparse.Namespace, message: str) -> None:
    """verify.json (and verify.md, verify.xml) saying once that the run could not be configured, with no check run."""
    from .report import Report, write_report
    from .report.junit import write_junit

    try:
        from .targets import resolve

        algorithm = resolve(args.target).algorithm
    except Exception:  # the target itself is what could not be configured
        algorithm = None
    report = Report(target=args.target, device=args.device, seed=args.seed, dtype=args.dtype, algorithm=algorithm)
    report.config_errors.append(message)
    write_report(report, args.report_dir, step_summary=False)
    write_junit(report, args.report_dir)
