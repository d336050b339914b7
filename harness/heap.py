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
- `settle()`: inside a `frozen()` block, collect what is garbage now and freeze what survives. The gate calls it as
  each scenario's observation is kept (harness/instrument/observe.py): the observations it keeps, and what each
  run left alive, then stay off the later collections, which would walk them all again (a gate's automatic
  collections, and the full collection accelerate's `free_memory` makes at the end of every `Trainer.train`: 15-23 %
  of a TRL gate's time before, about a third of that after; a reference gate's 6 % about as it was,
  docs/development.md). Outside a block it does nothing: freezing an in-process caller's objects would keep their
  cycles from the collector for good.
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
_blocks = 0
"""How many `frozen()` blocks are open (`settle` acts only inside one)."""


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """Inside the block the collector skips every object that existed when it began.

    Where something froze the heap before (a process forked from a gate server that froze its own), what
    the block froze stays frozen: `gc.unfreeze` cannot tell the two apart, and would hand the outer
    freeze's objects back to the collector too."""
    global _blocks
    outer = gc.get_freeze_count() > 0
    gc.freeze()
    _blocks += 1
    try:
        yield
    finally:
        _blocks -= 1
        if not outer:
            gc.unfreeze()  # what `settle` froze inside the block too


def settle() -> None:
    """Inside a `frozen()` block: a full collection, then what survives it frozen (garbage is never frozen, so
    nothing is kept that the collector would have freed). Outside one: nothing."""
    if _blocks:
        gc.collect()
        gc.freeze()


def no_teardown_walk() -> None:
    """Freeze the heap at this interpreter's exit, before its teardown collections (registered once)."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True
