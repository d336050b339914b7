"""`python -m harness.live --target NAME`: the demonstration of live mode that NAME's algorithm declares
(`Live.demo`), given the command's arguments. Without `--target` (or with a target no algorithm has), the first
algorithm with a live mode runs it, and its own parser answers (`--help`, a missing or unknown target)."""

from __future__ import annotations

import importlib
import sys

COMMAND = "python -m harness.live"


def target_of(argv: list[str]) -> str | None:
    """The value of `--target` in `argv` (`--target NAME` or `--target=NAME`), or None."""
    for i, arg in enumerate(argv):
        if arg == "--target" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--target="):
            return arg.partition("=")[2]
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the demonstration of the target's algorithm; exit code 2 with one line on stderr when that algorithm
    has no live mode."""
    from harness import algorithms

    argv = sys.argv[1:] if argv is None else list(argv)
    having = algorithms.with_live()
    target = target_of(argv)
    owner = algorithms.builtin_targets().get(target, (None,))[0] if target is not None else None
    if owner is not None and owner not in having:
        print(f"error: {COMMAND}: target {target!r} is of algorithm {owner!r}, which has no live mode (algorithms "
              f"with one: {', '.join(having) or 'none'})", file=sys.stderr, flush=True)  # fmt: skip
        return 2
    if owner is None and not having:
        print(f"error: {COMMAND}: no registered algorithm has a live mode", file=sys.stderr, flush=True)
        return 2
    module, _, function = algorithms.get(owner or having[0]).live.demo.partition(":")
    return getattr(importlib.import_module(module), function)(argv)
