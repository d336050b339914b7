"""A target that says, from inside each of its runs, whether what the gate imported while building it is out of the
collector's reach: the reference GRPO run, its `train` wrapped (tests/harness/test_heap.py).

The gate imports this module while it builds the target, after it froze what its own imports left; the objects made
here stand for a trainer's library that the target's module imports (TRL's, say), whose objects every full
collection of a run (accelerate's `free_memory` makes one per `Trainer.train`) would walk unless frozen too."""

from __future__ import annotations

import gc

IMPORTED = [[] for _ in range(3)]
"""Objects made at import that the collector tracks (containers), as a library's modules make them."""


def factory(spec):
    """The reference GRPO run of `spec`, printing before it trains whether IMPORTED is frozen (`gc.get_objects`
    lists only what the collector walks)."""
    from harness.targets import resolve

    run = resolve("reference-grpo").factory(spec)
    train = run.train

    def probed():
        walked = {id(o) for o in gc.get_objects()}
        frozen = not any(id(o) in walked for o in (IMPORTED, *IMPORTED))
        print(f"heap probe: objects made at the target's import frozen during its run: {frozen}", flush=True)
        return train()

    run.train = probed
    return run


factory.algorithm = "grpo"
