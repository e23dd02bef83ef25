"""A claim queue bucket's ready tasks, in one heap per STATIC priority (a band), and the
small heap of the bands' tops that plain claims read (queue.py).

Every due pending task of a (tenant, task_type) sits in the band of its static priority,
keyed by (static_key, run_at_ms, seq) as DESIGN section 5 orders claims; `ready` holds the
top of each non-empty band (the same tuple), so its top is the bucket's next task in claim
order and a plain claim pops two small heaps instead of one large one. A task's effective
priority is at most its static one, so a claim by a range whose lower bound is p needs only
the bands >= p (`band_max`, an upper bound of each band's keys, says which:
ranges.band_in); the tasks of more urgent static priorities cost it nothing.

Invariant, outside a weighted claim (weighted.py, which sets it back when it ends): each
band's top is live and `ready` holds exactly the non-empty bands' tops. Lists only, in a
fixed order; an entry is found in `ready` by identity, scanning its at most 11 entries.
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace

from .model import PENDING, Task
from .ranges import live

class Bucket:
    __slots__ = ("tenant", "task_type", "ready", "delayed", "bands", "band_max")

    def __init__(self, tenant: str, task_type: str) -> None:
        self.tenant = tenant
        self.task_type = task_type
        self.ready: list[tuple] = []    # bands' tops: (static_key, run_at_ms, seq, qver, task)
        self.delayed: list[tuple] = []   # (run_at_ms, seq, qver, task)
        self.bands: list[list[tuple]] = []   # by static priority, grown as tasks come
        self.band_max: list[int] = []   # >= every key pushed to the band (-1: none)


def band(bucket: Bucket, p: int, key: int) -> list[tuple]:
    """Band `p` of the bucket, its `band_max` raised to `key`."""
    if p >= len(bucket.bands):
        grow = p + 1 - len(bucket.bands)
        bucket.bands.extend([] for _ in range(grow))
        bucket.band_max.extend([-1] * grow)
    if key > bucket.band_max[p]:
        bucket.band_max[p] = key
    return bucket.bands[p]


def push(bucket: Bucket, entry: tuple, p: int, key: int) -> None:
    """Push a ready entry (of static priority `p`, key `key`) onto its band; a new top
    replaces the band's one in `ready`."""
    if p < len(bucket.bands):   # band(), inlined: every submit comes here
        heap = bucket.bands[p]
        if key > bucket.band_max[p]:
            bucket.band_max[p] = key
    else:
        heap = band(bucket, p, key)
    if not heap:
        heap.append(entry)
        heappush(bucket.ready, entry)
    elif entry < heap[0]:
        old = heap[0]
        heappush(heap, entry)
        swap_rep(bucket.ready, old, entry)
    else:
        heappush(heap, entry)


def pop(bucket: Bucket) -> Task:
    """Remove the bucket's next task in claim order (the top of `ready` and of its band)."""
    ready = bucket.ready
    task: Task = ready[0][-1]
    heap = bucket.bands[task.priority]
    heappop(heap)   # the same entry: `ready` holds the bands' tops
    while heap:
        top = heap[0]
        t = top[-1]
        if t.state == PENDING and t.qver == top[-2]:   # ranges.live, inlined
            heapreplace(ready, top)
            return task
        heappop(heap)
    heappop(ready)
    return task


def reps(bucket: Bucket) -> None:
    """Set `ready` to the bands' live tops (after a restore, or takes from inside bands)."""
    tops: list[tuple] = []
    for heap in bucket.bands:
        while heap and not live(heap[0]):
            heappop(heap)
        if heap:
            tops.append(heap[0])
    heapify(tops)
    bucket.ready[:] = tops


def fix_band(bucket: Bucket, p: int, old: tuple) -> None:
    """Band `p`'s top was `old` (its entry in `ready`): make it the band's live top."""
    heap = bucket.bands[p]
    while heap and not live(heap[0]):
        heappop(heap)
    new = heap[0] if heap else None
    if new is not old:
        swap_rep(bucket.ready, old, new)


def swap_rep(ready: list[tuple], old: tuple, new: tuple | None) -> None:
    """Replace a band's top `old` in `ready` by `new` (None: the band is empty). `ready`
    holds one entry per band, so the scan is short; found by identity, in list order."""
    for k in range(len(ready)):
        if ready[k] is old:
            if new is None:
                ready[k] = ready[-1]
                ready.pop()
            else:
                ready[k] = new
            heapify(ready)
            return
    raise AssertionError("a band's top is missing from ready")
