"""How the node keeps CPython's cyclic garbage collector from stalling Raft.

Theory of operation. A full (generation 2) collection walks every tracked object with the
GIL held. A node's state is long-lived objects (tasks, their attempts, index entries): at
100,000 tasks a full collection takes about 0.12 s, at 1,000,000 over a second, longer
than an election timeout, so a leader would be deposed by its own collector. Those objects
hold no reference cycles (reference counting frees a task when it is evicted), so walking
them again and again finds nothing.

So the survivors of each full collection, and a freshly restored state, are moved to the
permanent generation (`gc.freeze()`): later full collections walk only what was allocated
since. CPython starts a full collection once a quarter of the old generation is new, which
would still grow with the state; the node asks for a full collection itself after every
`MIDDLE_PER_FULL` collections of the middle generation (each moves at most ~7,500
survivors into the old one), on its event loop. The longest collection then stays in the
tens of milliseconds at 1,000,000 tasks (`python -m bench.gc_pause`; figures in
bench/notes/2026-11-30-gc-pauses.md and bench/notes/2026-12-02-gc-young-threshold.md).
Frozen objects are still freed by reference counting.

The price: an object frozen while alive that later becomes part of an unreachable cycle is
not reclaimed while it stays frozen. Under load every request in flight is alive at some
full collection, so a request path must leave no reference cycle behind (reference
counting alone must free it): one that did (a refusal through Raft raised from a local)
leaked its request at every collection (bench/notes/2026-12-01-overload.md).
`tests/unit/node/api/test_api_cycles.py` checks the request paths. After 60,000 task lifecycles a
node held 94-366 such objects. `tsched_gc_frozen_objects` shows the frozen count. A follower,
whose pauses delay no client, thaws everything every `THAW_INTERVAL_S` and collects in
full once, which reclaims them, while the frozen set is small enough (`THAW_FROZEN_MAX`)
for that pause to stay far below an election timeout; the leader never does it.
"""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import time
from typing import Callable

log = logging.getLogger("tsched.node.gc")

# Every collection is a pause with the GIL held, and its length follows the young
# threshold (a middle collection walks about twice as many objects, a full one about four
# times): young collections every 2,500 allocations keep each pause short, and freezing
# bounds the total work whatever the threshold, so collecting more often costs nothing
# measurable: bench/notes/2026-12-02-gc-young-threshold.md,
# bench/notes/2026-12-02-shorter-collection-pauses.md. The middle generation is
# collected every second young one.
GC_THRESHOLDS = (2_500, 2, 10)
# Middle-generation collections after which the node collects in full: the old generation
# then holds at most ~15,000 unfrozen objects (~0.3-1 us each to walk).
MIDDLE_PER_FULL = 2
THAW_CHECK_S = 60.0
THAW_INTERVAL_S = 3600.0
THAW_FROZEN_MAX = 500_000      # ~0.15-0.3 s for the thaw's full collection


def _libc_trim() -> Callable[[], int] | None:
    """glibc's `malloc_trim(0)`, or None elsewhere (musl, macOS: nothing to do)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


# Objects over 512 bytes (log entries, answers, dict tables) come from glibc's malloc, which
# keeps freed pages inside its heaps, so a node whose Raft log tail fills and is compacted
# over and over (overload) grew with nothing live growing. `malloc_trim(0)` gives the free
# pages back, every THAW_CHECK_S, in milliseconds: bench/notes/2026-12-01-overload.md.
TRIM_HEAP = _libc_trim()


def settle_router() -> None:
    """A router (a sharded node's supervisor) holds no state of its own: every object it
    makes lives for one request, but CPython's thresholds had its collections walk the
    modules' objects (aiohttp, the app) again and again
    (bench/notes/2026-12-02-shorter-collection-pauses.md). So the same young threshold as
    a node's, and what start-up made is collected once and frozen. Unlike `GcPolicy`, nothing made
    later is frozen: a request's cycles are always reclaimed by the collector."""
    gc.set_threshold(*GC_THRESHOLDS)
    gc.collect()
    gc.freeze()


class GcPolicy:
    """Installed once per process (`install`); counts collections and their pauses."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started_at: float | None = None
        # Per generation (0 young, 1 middle, 2 full): every collection is a pause with the
        # GIL held, and the middle ones were once nearly as long as the full ones (see
        # GC_THRESHOLDS).
        self.collections = [0, 0, 0]
        self.pause_s_max = [0.0, 0.0, 0.0]
        self.full_pause_s_last = 0.0
        self.thaws = 0
        self._installed = False
        self._middle_since_full = 0
        self._full_asked = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        """Set the thresholds and start freezing; what start-up has made so far (modules,
        configuration) is collected once and frozen now, not in the first busy minute."""
        gc.set_threshold(*GC_THRESHOLDS)
        if not self._installed:
            gc.collect()
            gc.freeze()
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_at = self._clock()
            return
        generation = info.get("generation")
        if generation not in (0, 1, 2):
            return
        pause_s = 0.0 if self._started_at is None else self._clock() - self._started_at
        self._started_at = None
        self.collections[generation] += 1
        if pause_s > self.pause_s_max[generation]:
            self.pause_s_max[generation] = pause_s
        if generation == 1:
            self._middle_since_full += 1
            self._ask_full()
        elif generation == 2:
            self._after_full(pause_s)

    @property
    def full_collections(self) -> int:
        return self.collections[2]

    @property
    def full_pause_s_max(self) -> float:
        return self.pause_s_max[2]

    def _after_full(self, pause_s: float) -> None:
        self.full_pause_s_last = pause_s
        self._middle_since_full = 0
        self._full_asked = False
        # A full collection leaves every survivor in generation 2 and the younger ones
        # empty: freezing now moves exactly the survivors.
        gc.freeze()

    def _ask_full(self) -> None:
        """From inside a collection (any thread): no collection may start here, so the
        event loop runs it next."""
        if self._middle_since_full < MIDDLE_PER_FULL or self._full_asked or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self.collect_if_due)
            self._full_asked = True
        except RuntimeError:
            pass    # the loop is closed: the node is stopping

    @staticmethod
    def after_restore() -> None:
        """A state was just loaded (with collections paused): keep it out of later walks."""
        gc.freeze()

    @staticmethod
    def frozen_objects() -> int:
        return gc.get_freeze_count()

    def thaw(self) -> float:
        """Unfreeze and collect in full now (the one long pause); returns its seconds."""
        started = self._clock()
        gc.unfreeze()
        gc.collect()     # the callback freezes the survivors again
        self.thaws += 1
        return self._clock() - started

    def collect_if_due(self) -> bool:
        """Collect in full (and so freeze) after MIDDLE_PER_FULL middle collections."""
        if self._middle_since_full < MIDDLE_PER_FULL:
            self._full_asked = False
            return False
        gc.collect()
        return True

    async def run(self, may_pause: Callable[[], bool], check_s: float = THAW_CHECK_S,
                  thaw_interval_s: float = THAW_INTERVAL_S) -> None:
        """Full collections on this loop when due; every `thaw_interval_s`, at a moment when
        `may_pause()` (this node is not the leader), a thaw."""
        self._loop = asyncio.get_running_loop()
        last_thaw = time.monotonic()
        while True:
            await asyncio.sleep(check_s)   # a period, not a synchronisation
            if TRIM_HEAP is not None:
                TRIM_HEAP()
            if time.monotonic() - last_thaw >= thaw_interval_s and may_pause() \
                    and gc.get_freeze_count() <= THAW_FROZEN_MAX:
                pause_s = self.thaw()
                last_thaw = time.monotonic()
                log.info("event=gc_thaw pause_ms=%.0f frozen=%d", pause_s * 1000,
                         gc.get_freeze_count())
