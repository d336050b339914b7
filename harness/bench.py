"""`python -m harness.bench`: the gate's speed and memory figures, measured side by side in one run.

1. Harness overhead: the uneven_split run spied and checked vs the same trainer run bare
   (same process, alternating, median of --repeat runs each). Goal <= 1.15x.
2. Recording memory: bytes the spy keeps for one uneven_split update at vocabulary 32k vs 256.
   Goal: the same within 10% (records never hold logits).
3. `python -m harness verify` wall time (a subprocess; the venv is already there). Goal < 60 s.

Set OMP_NUM_THREADS=1 for stable numbers (nox -s bench does).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def overhead(repeat: int) -> tuple[float, float]:
    """(median bare seconds, median spied-and-checked seconds) of the uneven_split training run."""
    from .algorithms.ppo.contract import POOLED_NAMES
    from .algorithms.ppo.expect import expected_metrics
    from .algorithms.ppo.scenarios import UNEVEN
    from .algorithms.ppo.view import build_view
    from .compare import compare
    from .instrument.grad import GradRecorder
    from .instrument.spy import Spy
    from .targets import resolve

    factory = resolve("reference").factory
    spec = UNEVEN.with_(total_updates=1)
    bare, checked = [], []
    for _ in range(repeat):
        run = factory(spec)
        bare.append(timed(run.train))
        run = factory(spec)

        def spied_and_checked(run=run):
            with Spy(run.module) as spy, GradRecorder(run.params, run.optimizer, clock=lambda: len(spy.records)):
                logs = run.train()
            (update,) = build_view(spy.records, run.stop_token_id, run.pad_token_id).updates
            expected = expected_metrics(update, spec.kl_coef, "k1")
            compare({n: logs[0][n] for n in POOLED_NAMES}, {n: expected[n] for n in POOLED_NAMES}, "float32")

        checked.append(timed(spied_and_checked))
    return statistics.median(bare), statistics.median(checked)


def recording_bytes(vocab_size: int) -> int:
    """Bytes of tensor data the spy keeps for one uneven_split update at `vocab_size`."""
    import dataclasses

    import torch

    from .algorithms.ppo.scenarios import UNEVEN
    from .instrument.spy import Spy
    from .targets import resolve

    run = resolve("reference").factory(UNEVEN.with_(total_updates=1, vocab_size=vocab_size))
    with Spy(run.module) as spy:
        run.train()
    tensors = [getattr(r, f.name) for r in spy.records for f in dataclasses.fields(r)]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def verify_wall_time() -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        code = subprocess.call(
            [sys.executable, "-m", "harness", "verify", "--report-dir", out, "-q", "--no-header"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return time.perf_counter() - start, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench", description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    import torch

    print(f"torch {torch.__version__} | threads {torch.get_num_threads()} | repeat {args.repeat}")
    bare, checked = overhead(args.repeat)
    ratio = checked / bare
    print(
        f"overhead   bare {bare * 1e3:8.1f} ms | spied+checked {checked * 1e3:8.1f} ms"
        f" | ratio {ratio:.2f}x (goal <= 1.15x)"
    )
    small, large = recording_bytes(256), recording_bytes(32000)
    print(f"recording  vocab 256: {small} B | vocab 32000: {large} B | ratio {large / small:.3f} (goal within 10%)")
    wall, code = verify_wall_time()
    print(f"verify     wall {wall:.1f} s, exit {code} (goal < 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
