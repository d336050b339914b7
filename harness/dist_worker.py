"""One rank of `python -m harness verify-dist` (`python -m harness.dist_worker --worker ...`, which
`python -m harness.dist` is too): the runs it makes, each saved as `<run>-rank<N>.pt`, or, where the run could not
be configured, the error saved as `<run>-rank<N>.error` in its stead, so that the other runs still run and the
checks that read them still report.

The runs are the algorithm's `rank_specs` (with the settings of `--set`), less those that only checks the target
declares not applicable read (`rank_reads`: each check of verify-dist with the runs it reads; an algorithm that does
not declare it runs every run). The parent computes the same plan (`planned_runs`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import HarnessConfigError

WORKER_CONFIG_ERROR = 2
"""A rank's exit code when the run as a whole could not be configured (the target, the settings)."""
ERROR_SUFFIX = ".error"
"""A run's file that says why it could not be configured, where its `.pt` would be."""


def resolved(target: str):
    """(`target` resolved once, its algorithm object): the algorithm's `rank_specs` and `rank_checks` drive the
    run."""
    from .algorithms import get
    from .targets import resolve

    found = resolve(target)
    return found, get(found.algorithm)


def rank_specs(algorithm: Any, seed: int, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The algorithm's runs for every rank, by name, with `settings` where there are any."""
    return dict(algorithm.rank_specs(seed, dict(settings)) if settings else algorithm.rank_specs(seed))


def rank_reads(algorithm: Any, processes: int) -> dict[Any, tuple[str, ...]] | None:
    """Each check of verify-dist by id, with the runs it reads; None where the algorithm does not say."""
    reads = getattr(algorithm, "rank_reads", None)
    return dict(reads(processes)) if reads is not None else None


def planned_runs(target: Any, algorithm: Any, processes: int, seed: int, settings: Mapping[str, Any]) -> dict:
    """The runs the ranks make: every run that a check the target does not declare not applicable reads."""
    specs, reads = rank_specs(algorithm, seed, settings), rank_reads(algorithm, processes)
    if reads is None:
        return specs
    wanted = {run for check_id, runs in reads.items() if target.not_applicable_reason(check_id) is None for run in runs}
    return {name: spec for name, spec in specs.items() if name in wanted}


def worker(target: str, seed: int, out: Path, settings: Sequence[str] = ()) -> int:
    """One rank: make every planned run (under its algorithm's instruments) and save what it saw; a run that cannot
    be configured saves why instead, and the rank goes on with the others."""
    import torch

    from .instrument.observe import observe

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    try:
        found, algorithm = resolved(target)
        parsed = algorithm.parse_settings(list(settings)) if settings else {}
        runs = planned_runs(found, algorithm, world, seed, parsed)
    except HarnessConfigError as exc:
        print(f"rank {rank}: configuration error: {exc}", file=sys.stderr)
        return WORKER_CONFIG_ERROR
    for name, spec in runs.items():
        try:
            # with the steps' .grad copies: the check across ranks compares them (algorithms/ppo/ranks.py)
            obs = observe(found.factory, algorithm.for_rank(spec, rank, world), copies=True)
        except HarnessConfigError as exc:  # raised as the run is built, alike on every rank: none waits for it
            print(f"rank {rank}: run {name} could not be configured: {exc}", file=sys.stderr)
            (out / f"{name}-rank{rank}{ERROR_SUFFIX}").write_text(str(exc), encoding="utf-8")
            continue
        ran = obs.ran if obs.ran is None else dataclasses.replace(obs.ran, networks=None)  # no model copies
        torch.save(ran, out / f"{name}-rank{rank}.pt")
    shut_down_process_group()  # on success only: a rank that raised must not wait for the others
    return 0


def shut_down_process_group() -> None:
    """Wait for every rank, then tear the process group down before the interpreter exits.

    Left to interpreter shutdown, gloo's threads can outlive their owner and abort the
    process ("terminate called without an active exception"), now and then.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.dist", description="one rank of `python -m harness verify-dist` (it starts them)"
    )
    parser.add_argument("--worker", action="store_true", required=True, help="run as one rank (required)")
    parser.add_argument("--target", required=True, help="the target the rank runs, as verify-dist's --target")
    parser.add_argument("--seed", type=int, default=0, help="the seed of every run (default 0)")
    parser.add_argument("--out", type=Path, required=True, help="the folder the rank saves what it saw to")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="a trainer setting of every run, as verify-dist's --set (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    from .heap import no_teardown_walk

    no_teardown_walk()  # a rank's teardown would walk torch's and transformers' objects (harness/heap.py)
    return worker(args.target, args.seed, args.out, args.settings)


if __name__ == "__main__":
    sys.exit(main())
