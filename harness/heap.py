"""Keeping Python's cyclic garbage collector off the heap that torch and transformers leave after their imports.

Importing torch, transformers and accelerate leaves a few hundred thousand long-lived objects. Every
full collection walks all of them: the collections of a gate's own runs, and those of the
interpreter's teardown at exit (about 1 to 1.5 s of a gate process here, measured in
docs/development.md, "The collector and the imported heap"), in a gate whose checks may take less
than a second. `gc.freeze()` moves every object alive at that moment out
of the collector's reach; new objects are collected as usual.

- `frozen()`: a block (the gate's run, harness/verify_command.py) during which what existed before it is frozen;
  unfrozen after (unless an outer freeze was there), so that an in-process caller's objects are
  collectable again. The gate opens a second block inside the first once it has built the target, for what
  the build imported: a target's library (TRL's trainers, datasets) is imported then, and accelerate's
  `free_memory`, which `transformers.Trainer.train` calls at the end of every run, makes a full collection
  that walked those objects each time (half of a TRL gate's time, docs/development.md).
- `no_teardown_walk()`: at the interpreter's exit (atexit, which runs before the teardown), freeze
  what is left. Objects reachable from modules are still torn down and finalized by their reference
  counts as before; only garbage cycles left at exit go unfinalized, their memory the system's.

Neither changes what a gate computes (the same verify.json to the last digit, with and without).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
from collections.abc import Iterator

_registered = False


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """Inside the block the collector skips every object that existed when it began.

    Where something froze the heap before (a process forked from a gate server that froze its own), what
    the block froze stays frozen: `gc.unfreeze` cannot tell the two apart, and would hand the outer
    freeze's objects back to the collector too."""
    outer = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not outer:
            gc.unfreeze()


def no_teardown_walk() -> None:
    """Freeze the heap at this interpreter's exit, before its teardown collections (registered once)."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True
