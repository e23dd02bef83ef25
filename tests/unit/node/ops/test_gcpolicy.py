"""The node's garbage-collection policy: survivors of full collections are frozen, cycles
made afterwards are still collected, and a thaw reclaims cycles that were frozen."""
import gc
import os
import platform
import sys
import weakref

import pytest

from tsched.node.gcpolicy import GC_THRESHOLDS, MIDDLE_PER_FULL, GcPolicy


class Node:
    """A cyclic object we can watch die."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def policy():
    saved = gc.get_threshold()
    p = GcPolicy()
    p.install()
    try:
        yield p
    finally:
        p.uninstall()
        gc.unfreeze()
        gc.set_threshold(*saved)


def test_install_sets_thresholds_and_freezes_what_start_up_made(policy):
    assert gc.get_threshold() == GC_THRESHOLDS
    assert policy.full_collections == 0
    assert policy.frozen_objects() > 0


def test_survivors_of_a_full_collection_are_frozen_and_timed(policy):
    kept = [Node() for _ in range(1000)]
    before = policy.frozen_objects()
    gc.collect()
    assert policy.frozen_objects() >= before + 1000
    assert policy.full_collections == 1
    assert 0 <= policy.full_pause_s_last <= policy.full_pause_s_max
    assert len(kept) == 1000


def test_every_generation_is_counted_and_timed(policy):
    for generation in (0, 1, 2):
        gc.collect(generation)
    assert all(n >= 1 for n in policy.collections), policy.collections
    assert all(s >= 0 for s in policy.pause_s_max)
    assert policy.full_collections == policy.collections[2]


def test_pauses_are_read_from_the_clock_around_each_collection():
    ticks = iter([10.0, 10.25, 20.0, 20.5, 30.0, 30.125])
    p = GcPolicy(clock=lambda: next(ticks))
    try:
        for generation in (1, 0, 2):
            p._on_gc("start", {"generation": generation})
            p._on_gc("stop", {"generation": generation, "collected": 0, "uncollectable": 0})
    finally:
        gc.unfreeze()     # the full collection's stop froze this process's objects
    assert p.pause_s_max == [0.5, 0.25, 0.125]
    assert p.collections == [1, 1, 1]
    assert p.full_pause_s_last == p.full_pause_s_max == 0.125


def test_cycles_made_after_a_freeze_are_still_collected(policy):
    ref = weakref.ref(Node())
    assert ref() is not None     # only its own cycle keeps it alive
    gc.collect()
    assert ref() is None


def test_frozen_objects_without_cycles_are_freed_by_reference_counting(policy):
    class Plain:
        pass
    obj = Plain()
    ref = weakref.ref(obj)
    gc.collect()                 # obj is frozen now
    del obj
    assert ref() is None


def test_a_thaw_reclaims_a_cycle_that_was_frozen_while_alive(policy):
    node = Node()
    ref = weakref.ref(node)
    gc.collect()                 # frozen while reachable
    del node
    gc.collect()
    assert ref() is not None     # the cost the policy accepts
    policy.thaw()
    assert ref() is None
    assert policy.thaws == 1
    assert policy.frozen_objects() > 0   # the thaw's collection froze its survivors again


def test_restore_freezes_the_loaded_state(policy):
    gc.unfreeze()
    state = [Node() for _ in range(100)]
    GcPolicy.after_restore()
    assert policy.frozen_objects() >= 100
    assert len(state) == 100


def test_the_node_collects_in_full_after_middle_generation_collections(policy):
    kept = [Node() for _ in range(3000)]
    assert not policy.collect_if_due()
    for _ in range(MIDDLE_PER_FULL):
        gc.collect(1)                   # young survivors move to the old generation
    assert len(gc.get_objects(generation=2)) >= 3000
    assert policy.collect_if_due()
    assert len(gc.get_objects(generation=2)) == 0    # all frozen
    assert policy.full_collections == 1 and len(kept) == 3000
    assert not policy.collect_if_due()  # the count starts again


async def test_on_a_loop_the_full_collection_is_asked_for_by_the_collector(policy):
    import asyncio
    runner = asyncio.ensure_future(policy.run(lambda: False))
    await asyncio.sleep(0)              # run() has taken the loop
    kept = [Node() for _ in range(1000)]
    for _ in range(MIDDLE_PER_FULL):
        gc.collect(1)
    assert policy.full_collections == 0
    deadline = asyncio.get_running_loop().time() + 5
    while policy.full_collections == 0:
        assert asyncio.get_running_loop().time() < deadline, "no full collection was run"
        await asyncio.sleep(0)          # the loop runs what the callback scheduled
    runner.cancel()
    assert len(kept) == 1000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's")
def test_freed_malloc_pages_go_back_to_the_system():
    from tsched.node.gcpolicy import TRIM_HEAP
    assert TRIM_HEAP is not None
    # 64 KiB blocks come from malloc's heap (under its mmap threshold), not from pymalloc;
    # freeing every other one leaves holes that the heap keeps until it is trimmed
    blocks = [bytearray(64 << 10) for _ in range(1_000)]
    del blocks[::2]
    before = _rss_bytes()
    TRIM_HEAP()
    assert before - _rss_bytes() > (500 * (64 << 10)) // 2   # most of the ~32 MB freed


def test_a_router_freezes_what_start_up_made_and_nothing_after():
    from tsched.node.gcpolicy import settle_router
    saved = gc.get_threshold()
    try:
        made_before = Node()
        settle_router()
        assert gc.get_threshold() == GC_THRESHOLDS
        frozen = gc.get_freeze_count()
        assert frozen > 0
        # Unlike a node's policy, a later full collection freezes none of its survivors:
        # a request's objects that later form a cycle must still be reclaimed.
        alive = Node()
        gc.collect()
        assert gc.get_freeze_count() == frozen
        gone = weakref.ref(alive)
        del alive
        gc.collect()
        assert gone() is None
        assert made_before.me is made_before
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
