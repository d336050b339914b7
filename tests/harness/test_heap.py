"""harness/heap.py: the collector kept off the imported heap, and the heap handed back to an in-process caller."""

from __future__ import annotations

import atexit
import gc
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from harness import heap

ROOT = Path(__file__).resolve().parents[2]


def test_frozen_freezes_for_the_block_and_hands_everything_back_after():
    assert gc.get_freeze_count() == 0
    kept = [object() for _ in range(10)]
    with heap.frozen():
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        young = []
        # What the block makes is not frozen: the collector still sees it. The count itself may fall meanwhile (a
        # frozen object freed by its last reference, on another thread too: pytest-xdist's), but never grows.
        assert any(tracked is young for tracked in gc.get_objects())
        assert gc.get_freeze_count() <= frozen
        assert not any(tracked is kept for tracked in gc.get_objects())  # what was alive before the block is frozen
    assert gc.get_freeze_count() == 0  # an in-process caller's objects are collectable again


def test_an_outer_freeze_stays_frozen_after_the_block():
    gc.freeze()
    try:
        outer = gc.get_freeze_count()
        with heap.frozen():
            pass
        assert gc.get_freeze_count() >= outer  # unfreezing would have handed the outer freeze's objects back
    finally:
        gc.unfreeze()


def test_garbage_made_inside_the_block_is_still_collected():
    class Node:
        pass

    with heap.frozen():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        del a, b
        assert gc.collect() >= 2


def test_settle_outside_a_block_freezes_nothing():
    assert gc.get_freeze_count() == 0
    heap.settle()
    assert gc.get_freeze_count() == 0  # an in-process caller's objects stay the collector's


def test_settle_frees_the_garbage_and_freezes_what_lives_until_the_block_ends():
    class Node:
        pass

    with heap.frozen():
        kept = [Node()]
        a, b = Node(), Node()
        a.other, b.other = b, a
        freed = weakref.ref(a)
        del a, b
        heap.settle()
        assert freed() is None  # the cycle was collected, never frozen
        assert not any(tracked is kept for tracked in gc.get_objects())  # what lives is frozen
    assert gc.get_freeze_count() == 0 and any(tracked is kept for tracked in gc.get_objects())


def test_the_observation_cache_settles_once_for_each_run_it_makes(monkeypatch):
    from harness.algorithms.ppo.scenarios import pooled
    from harness.instrument import observe

    settled = []
    monkeypatch.setattr(observe, "settle", lambda: settled.append(1))

    def factory(spec):
        raise RuntimeError("the trainer broke")

    cache = observe.ObservationCache(factory)
    crashed = cache.get(pooled.LR0)
    assert crashed.ran is None and settled == [1]  # a crashed run is kept too
    assert cache.get(pooled.LR0) is crashed and settled == [1]  # served from the cache: nothing new to settle
    cache.get(pooled.LR0.with_(name="another"))
    assert settled == [1, 1]


def test_the_exit_freeze_is_registered_once():
    before = atexit._ncallbacks()
    heap.no_teardown_walk()
    heap.no_teardown_walk()
    assert atexit._ncallbacks() - before <= 1
    assert heap._registered


def test_a_gate_process_exits_with_its_code_and_its_output_after_the_exit_freeze():
    code = (
        "import atexit, sys\n"
        "from harness.heap import no_teardown_walk\n"
        "no_teardown_walk()\n"
        "atexit.register(lambda: print('handler after', flush=True))\n"
        "print('out', end='')\n"
        "sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "outhandler after\n"


PROBE = "tests.support.heap_probe:factory"
GATE_COMMANDS = {
    "verify": ["-m", "harness", "verify", f"--target={PROBE}", "--check=extremes"],
    "pytest plugin": ["-m", "pytest", "-p", "no:cacheprovider", "-s", "-q", "--pyargs", "harness.suite",
                      f"--ppo-target={PROBE}", "--ppo-check=extremes"],
}  # fmt: skip


@pytest.mark.parametrize("how", GATE_COMMANDS)
def test_what_building_the_target_imported_is_frozen_while_its_checks_run(tmp_path, how):
    """A gate process freezes what its imports left before it builds the target, and again after, so that the runs'
    collections skip the target's library too (a TRL gate spent half its time in accelerate's gc.collect); the
    pytest plugin's session gate builds its target and freezes likewise."""
    command = [sys.executable, *GATE_COMMANDS[how], *(["--report-dir", str(tmp_path)] if how == "verify" else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = [line for line in done.stdout.splitlines() if line.startswith("heap probe:")]
    assert said and all(line.endswith("during its run: True") for line in said), said
