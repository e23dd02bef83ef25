"""Weighted polling by tier (DESIGN section 5.1): a claim that carries `tier_weights`
splits its tasks over the named tiers by smooth weighted round robin.

The credits start at 0 in every claim. For each task, every named tier that still has
claimable work adds its weight to its credit; the tier with the most credit (the more
urgent on a tie: tiers are listed most urgent first) gives its most urgent task, in the
claim order of section 5 within its range, and loses the sum of the weights that took
part. A tier found empty drops out for the rest of the claim, so its share goes to the
others. Over a claim of the weights' sum in tasks, with work in every tier, each tier
gives exactly its weight.

How a tier's next task is found: each band (static priority) of a bucket's ready tasks
that can hold a task of a named tier is walked once per claim from its root, as a range
walk does (ranges.py), and for each named tier the walk keeps its *frontier*: the live
entries in the tier's key range none of whose ancestors in the band is a live entry of
that tier (a small heap per tier and bucket, of (key, band, index)). The least of a
frontier is the tier's most urgent entry in the bucket. A band is walked only for the
tiers it can hold (a task's effective priority is at most its static one), and not below
the last of them, so the tasks of more urgent static priorities cost nothing. While the
claim runs the bands keep their shape: a taken entry dies in place (its task is no longer
pending) and its children join the frontier, so a task costs a pop and a push or two, not
a walk. When the weighted part ends, the taken entries are removed from inside their bands
(`_remove`) and the bucket's `ready` is set to the bands' new tops.
Deterministic: lists in a fixed order, no set iterated, nothing read but the queue.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from bisect import bisect_left
from heapq import heapify, heappop, heappush

from .model import PENDING, Task, TenantView
from .bands import Bucket
from .queue import ClaimQueue
from .ranges import key_bounds, live, pop_at
from .rules import effective_priority


class _Tier:
    """One named tier of a claim: its key bounds at the claim's `now`, weight, credit and
    frontier per bucket (a heap of ((key, run_at, seq), band, index in the band))."""
    __slots__ = ("lo", "hi", "weight", "credit", "front")

    def __init__(self, triple: tuple[int, int, int], now_ms: int, aging_ms: int,
                 buckets: int) -> None:
        self.lo, self.hi = key_bounds((triple[0], triple[1]), now_ms, aging_ms)
        self.weight: int = triple[2]
        self.credit = 0
        self.front: list[list[tuple]] = [[] for _ in range(buckets)]


def select(queue: ClaimQueue, task_types: Sequence[str], tenant: str | None,
           tenants: dict[str, TenantView], now_ms: int, prefetch_ms: int, max_tasks: int,
           grant: Callable[[Task], None],
           weights: tuple[tuple[int, int, int], ...]) -> list[Task]:
    """Remove up to `max_tasks` tasks of the named tiers, split by their weights, calling
    `grant(task)` on each before choosing the next; then, with room left, early dispatch
    of the named tiers' not-yet-due tasks (as for a range, section 5)."""
    by_tenant = queue.gather(task_types, tenant, now_ms)
    flat: list[Bucket] = [b for buckets in by_tenant.values() for b in buckets]
    tiers = [_Tier(w, now_ms, queue.aging_ms, len(flat)) for w in weights]
    for j, bucket in enumerate(flat):
        _frontiers(bucket, j, tiers)
    taken: list[list[tuple[int, int]]] = [[] for _ in flat]   # per bucket: (band, index)
    out: list[Task] = []
    while len(out) < max_tasks:
        taking: list[tuple[_Tier, tuple]] = []
        for tier in tiers:
            cand = _candidate(queue, tier, flat, tenants, now_ms)
            if cand is not None:
                taking.append((tier, cand))
        tiers = [t for t, _ in taking]   # a tier found empty drops out for the claim
        if not taking:
            break
        total = 0
        pick = taking[0]
        for tier, cand in taking:
            tier.credit += tier.weight
            total += tier.weight
            if tier.credit > pick[0].credit:
                pick = (tier, cand)
        pick[0].credit -= total
        out.append(_take(pick[0], pick[1], taken, grant))
    _remove(queue, flat, taken)
    while len(out) < max_tasks and prefetch_ms > 0:
        found = _early(queue, by_tenant, tenants, now_ms, prefetch_ms, weights)
        if found is None:
            break
        out.append(queue.take_at(found[0], found[0].delayed, found[1], grant))
    return out


def _frontiers(bucket: Bucket, j: int, tiers: list[_Tier]) -> None:
    """Fill every tier's frontier of bucket `j`: each band is walked for the tiers whose
    lower bound is below its greatest key (a prefix of the tiers: they are listed most
    urgent first), then the frontiers are ordered."""
    for p, band in enumerate(bucket.bands):
        top = bucket.band_max[p]
        k = 0
        while k < len(tiers) and tiers[k].lo < top:
            k += 1
        if band and k:
            _walk(band, p, j, tiers[:k])
    for tier in tiers:
        heapify(tier.front[j])


def _walk(heap: list, p: int, j: int, tiers: list[_Tier]) -> None:
    """Walk band `p` once, adding to every tier's frontier of bucket `j`. Below a live
    entry of tier t the entries of t are not frontier (`cover`: the last tier met on the
    path); the walk stops below the last tier's lower bound (deeper entries are all in the
    last tier, under a frontier entry of it, or past it). Tight: it visits the band's
    tasks more urgent than the last tier it can hold."""
    los = [t.lo for t in tiers]
    his = [t.hi for t in tiers]
    fronts = [t.front[j] for t in tiers]
    first_lo, last_lo, last_hi = los[0], los[-1], his[-1]
    n = len(heap)
    at: list[int] = [0] if n else []
    covers: list[int] = [-1] if n else []
    while at:
        i = at.pop()
        cover = covers.pop()
        entry = heap[i]
        key = entry[0]
        if key > last_hi:
            continue
        task = entry[-1]
        if task.state == PENDING and task.qver == entry[-2]:   # ranges.live, inlined
            if key > first_lo:
                t = bisect_left(his, key)
                if key > los[t] and t != cover:
                    fronts[t].append((entry[:3], p, i))
                    cover = t
            if key > last_lo:
                continue
        child = 2 * i + 1
        if child < n:
            at.append(child)
            covers.append(cover)
            if child + 1 < n:
                at.append(child + 1)
                covers.append(cover)


def _candidate(queue: ClaimQueue, tier: _Tier, flat: list[Bucket],
               tenants: dict[str, TenantView], now_ms: int) -> tuple | None:
    """The tier's next task in claim order: (eff, key, bucket, j), or None."""
    pick = None
    for j, bucket in enumerate(flat):
        front = tier.front[j]
        if not front or tenants[bucket.tenant].at_cap():
            continue
        key = front[0][0]
        cand = (effective_priority(key[0], now_ms, queue.aging_ms), key, bucket, j)
        if pick is None or queue.before(cand, pick, tenants):
            pick = cand
    return pick


def _take(tier: _Tier, cand: tuple, taken: list[list[tuple[int, int]]],
          grant: Callable[[Task], None]) -> Task:
    """Grant the tier's least frontier entry of the candidate's bucket; the entry dies in
    place and its children in the tier's range (through dead ones) join the frontier."""
    bucket: Bucket = cand[2]
    j: int = cand[3]
    front = tier.front[j]
    _, p, i = heappop(front)
    heap = bucket.bands[p]
    task = heap[i][-1]
    grant(task)
    assert not live(heap[i]), "a granted task is no longer pending"
    taken[j].append((p, i))
    stack = [c for c in (2 * i + 1, 2 * i + 2) if c < len(heap)]
    while stack:
        c = stack.pop()
        entry = heap[c]
        if entry[0] > tier.hi:
            continue
        if live(entry) and entry[0] > tier.lo:
            heappush(front, (entry[:3], p, c))
            continue
        stack += [g for g in (2 * c + 1, 2 * c + 2) if g < len(heap)]
    return task


def _remove(queue: ClaimQueue, flat: list[Bucket], taken: list[list[tuple[int, int]]]) -> None:
    """Remove the taken entries from inside their bands, then set each bucket's `ready`
    to its bands' new tops."""
    for j, pairs in enumerate(taken):
        if not pairs:
            continue
        bucket = flat[j]
        for p in sorted(dict.fromkeys(p for p, _ in pairs)):
            _remove_from(bucket.bands[p], [i for q, i in pairs if q == p])
        queue.reps(bucket)
        queue.clean(bucket)


def _remove_from(heap: list, indices: list[int]) -> None:
    """Remove entries from inside a heap, the deepest index first: a removal moves only the
    entries on the path from its place to the root down one level each (none below it is a
    taken one by then), so a taken entry that moved is found one level down that path."""
    left = sorted(((i, heap[i]) for i in indices), key=lambda p: p[0])
    while left:
        i = left.pop()[0]
        pop_at(heap, i)
        for n, (at, entry) in enumerate(left):
            if heap[at] is not entry:   # moved down one level, toward i
                c = i
                while c > 0 and (c - 1) >> 1 != at:
                    c = (c - 1) >> 1
                assert heap[c] is entry, "a taken entry moved off the path"
                left[n] = (c, entry)
        left.sort(key=lambda p: p[0])


def _early(queue: ClaimQueue, by_tenant: dict[str, list[Bucket]],
           tenants: dict[str, TenantView], now_ms: int, prefetch_ms: int,
           weights: tuple[tuple[int, int, int], ...]) -> tuple[Bucket, int] | None:
    """Where the due-soon task of any named tier with the earliest (run_at, seq) is."""
    found = None
    for lo, hi, _ in weights:
        got = queue.early_in_range(by_tenant, tenants, now_ms, prefetch_ms, (lo, hi))
        if got is not None and (found is None or
                                got[0].delayed[got[1]][:2] < found[0].delayed[found[1]][:2]):
            found = got
    return found
