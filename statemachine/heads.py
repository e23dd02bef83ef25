"""A claim's head: how urgent the most urgent task a claim of a kind would take is.

The router of a sharded node compares the shards' heads to ask the most urgent shard first
(DESIGN.md sections 5.1 and 13). A head is the *effective* priority (aging included, at
`now_ms`) of the most urgent claimable task for a claim's kind (task types, tenant,
prefetch, priority range), or None when such a claim would find nothing: the same tasks a
`Claim` would consider, in the same order of section 5 (due tasks first; with prefetch, a
not-yet-due one only when nothing is due, at its priority when due).

A read: nothing changes (due tasks still in a `delayed` heap are looked at where they are,
not moved to `ready`). Its cost is that of `has_claimable`: each bucket's ready top (for a
range, the walk of `ranges.band_in` over the bands that can hold it), plus the due entries of a bucket's delayed heap more
urgent than the best found so far (a delayed heap is ordered by run_at, and a due entry's
static key is never below its run_at, so the walk stops at the first run_at past the best
key), plus the prefetch candidates when nothing is due.
"""
from __future__ import annotations

from collections.abc import Sequence

from .model import TenantView
from .queue import Bucket, ClaimQueue
from .ranges import band_in, delayed_in, key_bounds, live
from .rules import effective_priority, static_key

NONE = -1   # no key found (static keys are >= 0)


def claim_head(queue: ClaimQueue, task_types: Sequence[str], tenant: str | None,
               tenants: dict[str, TenantView], now_ms: int, prefetch_ms: int,
               priorities: tuple[int, int] = (0, 10)) -> int | None:
    """The effective priority at `now_ms` of the most urgent task a claim of this kind
    would take (the first one's), or None when it would take none."""
    aging = queue.aging_ms
    lo, hi = key_bounds(priorities, now_ms, aging)
    buckets: list[Bucket] = [b for b in queue._buckets(task_types, tenant)
                             if not tenants[b.tenant].at_cap()]
    best = NONE
    for bucket in buckets:
        key = _due_key(bucket, now_ms, lo, hi, best, aging)
        if key != NONE:
            best = key
            if effective_priority(best, now_ms, aging) <= priorities[0]:
                break          # nothing can be more urgent than the range's floor
    if best != NONE:
        return effective_priority(best, now_ms, aging)
    if prefetch_ms <= 0:
        return None
    return _early_head(buckets, now_ms, now_ms + prefetch_ms, lo, hi, priorities, aging)


def _due_key(bucket: Bucket, now_ms: int, lo: int, hi: int, bound: int, aging: int) -> int:
    """The least static key in lo < key <= hi among the bucket's due tasks (its bands
    and the due entries of its delayed heap) if below `bound` (NONE: no bound), else NONE."""
    found = NONE
    p, i = band_in(bucket.ready, bucket.bands, bucket.band_max, lo, hi)
    if i >= 0:
        key: int = bucket.bands[p][i][0] if lo >= 0 else bucket.ready[0][0]
        if bound == NONE or key < bound:
            found = key
    late = _delayed_due_key(bucket.delayed, now_ms, lo, hi,
                            found if found != NONE else bound, aging)
    return late if late != NONE else found


def _delayed_due_key(heap: list, now_ms: int, lo: int, hi: int, bound: int, aging: int
                     ) -> int:
    """The least static key in lo < key <= hi, below `bound` (NONE: no bound), of the live
    due entries of a delayed heap (run_at, seq, qver, task); NONE if there is none. A
    subtree whose root's run_at is past now, past `hi` or at least the best key so far
    holds nothing better (children are never earlier; a key is never below its run_at)."""
    found = NONE
    stack: list[int] = [0] if heap else []
    n = len(heap)
    while stack:
        i = stack.pop()
        entry = heap[i]
        run_at: int = entry[0]
        if run_at > now_ms or run_at > hi or (bound != NONE and run_at >= bound):
            continue
        if live(entry):
            key = static_key(entry[-1].priority, run_at, aging)
            if lo < key <= hi and (bound == NONE or key < bound):
                bound = found = key
        for child in (2 * i + 1, 2 * i + 2):
            if child < n:
                stack.append(child)
    return found


def _early_head(buckets: list[Bucket], now_ms: int, horizon: int, lo: int, hi: int,
                priorities: tuple[int, int], aging: int) -> int | None:
    """With nothing due: the priority of the not-yet-due task a claim with prefetch would
    take (the earliest run_at due by `horizon`, in range), or None."""
    ranged = priorities[0] > 0 or priorities[1] < 10
    pick: tuple | None = None
    for bucket in buckets:
        delayed = bucket.delayed
        if not delayed:
            continue
        i = delayed_in(delayed, now_ms, horizon, lo, hi, priorities, aging) if ranged else 0
        if i < 0 or delayed[i][0] > horizon:
            continue
        if pick is None or delayed[i][:2] < pick[:2]:
            pick = delayed[i]
    if pick is None:
        return None
    return int(pick[-1].priority)
