"""The claim queue's heap walks for claims by priority range (DESIGN section 5).

A range of effective priorities is an interval of static keys at the claim's `now`
(`key_bounds`); these walks find, inside one heap, the least live entry in such an
interval (`ready_in`; over a bucket's bands, `band_in`), the earliest due-soon entry in
range (`delayed_in`), and remove an entry from inside a heap (`pop_at`). They read and reorder plain heaps of entries
(queue.py's tuples, the task last, its `qver` before it) and nothing else.
"""
from __future__ import annotations

from .model import PENDING
from .rules import static_key


def live(entry: tuple) -> bool:
    task = entry[-1]
    return task.state == PENDING and task.qver == entry[-2]


def key_bounds(priorities: tuple[int, int], now_ms: int, aging_ms: int) -> tuple[int, int]:
    """The static keys (rules.static_key) whose effective priority at `now_ms` is in the
    inclusive range: lo < key <= hi. (eff <= p iff key <= now + p * aging; eff >= p > 0 iff
    key > now + (p - 1) * aging.) No bound is -1 / a key past every task's."""
    pmin, pmax = priorities
    lo = now_ms + (pmin - 1) * aging_ms if pmin > 0 else -1
    hi = now_ms + pmax * aging_ms if pmax < 10 else now_ms + 11 * aging_ms
    return lo, hi


def ready_in(heap: list, lo: int, hi: int) -> int:
    """Index of the least live ready entry with lo < key <= hi, or -1. Walks the heap from
    its root: below an entry over `hi` nothing is in range (a heap's children are never
    less), so the walk visits only the entries more urgent than the range (key <= lo), dead
    ones, and the frontier. With no lower bound that is the top alone."""
    best = -1
    stack = [0] if heap else []
    while stack:
        i = stack.pop()
        entry = heap[i]
        if entry[0] > hi:
            continue
        if entry[0] > lo and live(entry):
            if best < 0 or entry[:3] < heap[best][:3]:
                best = i
            continue
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                stack.append(child)
    return best


def band_in(ready: list, bands: list[list[tuple]], band_max: list[int], lo: int,
            hi: int) -> tuple[int, int]:
    """(band, index) of the least live entry with lo < key <= hi over a bucket's bands
    (`ready`: their live tops), or (-1, -1). Without a lower bound that is the bucket's
    top. A band whose keys are all at or below `lo` (`band_max`: a task's effective
    priority is at most its static one) is not walked, so the tasks of static priorities
    more urgent than the range cost nothing; inside a band the walk visits the entries
    that aged past the range's lower bound, dead ones and the frontier."""
    if lo < 0:
        if ready and ready[0][0] <= hi:
            return ready[0][-1].priority, 0
        return -1, -1
    best_p = best_i = -1
    for p in range(len(bands)):
        band = bands[p]
        if band_max[p] <= lo or not band or band[0][0] > hi:
            continue
        i = ready_in(band, lo, hi)
        if i >= 0 and (best_p < 0 or band[i][:3] < bands[best_p][best_i][:3]):
            best_p, best_i = p, i
    return best_p, best_i


def delayed_in(heap: list, now_ms: int, horizon: int, lo: int, hi: int,
                priorities: tuple[int, int], aging_ms: int) -> int:
    """Index of the earliest live delayed entry due by `horizon` whose effective priority
    is in range (a due one's by its key at now; one not due yet by its priority, its
    effective priority when due), or -1."""
    best = -1
    stack = [0] if heap else []
    while stack:
        i = stack.pop()
        entry = heap[i]
        run_at = entry[0]
        if run_at > horizon:
            continue
        task = entry[-1]
        if live(entry):
            if run_at <= now_ms:
                key = static_key(task.priority, run_at, aging_ms)
                ok = lo < key <= hi
            else:
                ok = priorities[0] <= task.priority <= priorities[1]
            if ok and (best < 0 or entry[:2] < heap[best][:2]):
                best = i
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                stack.append(child)
    return best


def pop_at(heap: list, i: int) -> None:
    """Remove entry `i` of a heap, keeping it a heap (deterministic: same heap, same result)."""
    last = heap.pop()
    if i == len(heap):
        return
    heap[i] = last
    while i > 0:
        parent = (i - 1) >> 1
        if heap[i] < heap[parent]:
            heap[i], heap[parent] = heap[parent], heap[i]
            i = parent
        else:
            break
    n = len(heap)
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] < heap[i]:
            heap[i], heap[child] = heap[child], heap[i]
            i = child
        else:
            break
