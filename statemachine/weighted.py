"""Weighted polling by tier (DESIGN section 5.1): a claim that carries `tier_weights`
splits its tasks over the named tiers by smooth weighted round robin.

The credits start at 0 in every claim. For each task, every named tier that still has
claimable work adds its weight to its credit; the tier with the most credit (the more
urgent on a tie: tiers are listed most urgent first) gives its most urgent task, in the
claim order of section 5 within its range, and loses the sum of the weights that took
part. A tier found empty drops out for the rest of the claim, so its share goes to the
others. Over a claim of the weights' sum in tasks, with work in every tier, each tier
gives exactly its weight.

Finding a tier's most urgent task in a bucket is a range walk of that bucket's heap
(ranges.py). Each tier keeps, per bucket, the entry the last walk found: taking a task
changes only the taken tier's range in its bucket (the other ranges' least entries stay
where they are in value, if not always in place), so per task claimed only the taken
tier walks, for its next entry (and for the taken one's place if another take moved it). Deterministic: lists in a fixed order,
no set iterated, nothing read but the queue and the tenants.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from .model import Task, TenantView
from .queue import Bucket, ClaimQueue
from .ranges import key_bounds, ready_in
from .rules import effective_priority


class _Tier:
    """One named tier of a claim: its key bounds at the claim's `now`, weight, credit and
    the best entry found per bucket (None: none in range; `known` False: not looked yet)."""
    __slots__ = ("priorities", "lo", "hi", "weight", "credit", "best", "at", "known")

    def __init__(self, triple: tuple[int, int, int], now_ms: int, aging_ms: int,
                 buckets: int) -> None:
        self.priorities: tuple[int, int] = (triple[0], triple[1])
        self.lo, self.hi = key_bounds(self.priorities, now_ms, aging_ms)
        self.weight: int = triple[2]
        self.credit = 0
        self.best: list[tuple | None] = [None] * buckets
        self.at: list[int] = [-1] * buckets      # where `best` was (other takes move it)
        self.known: list[bool] = [False] * buckets

    def entry(self, j: int, bucket: Bucket) -> tuple | None:
        if not self.known[j]:
            i = ready_in(bucket.ready, self.lo, self.hi)
            self.best[j] = bucket.ready[i] if i >= 0 else None
            self.at[j] = i
            self.known[j] = True
        return self.best[j]

    def index(self, j: int, bucket: Bucket) -> int:
        """Where the best entry of bucket `j` is now (looked for again if it moved)."""
        heap, i = bucket.ready, self.at[j]
        if not (0 <= i < len(heap) and heap[i] is self.best[j]):
            i = ready_in(heap, self.lo, self.hi)
            assert i >= 0 and heap[i] is self.best[j], "a tier's best entry left its heap"
        return i


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
        out.append(_take(queue, pick[0], pick[1], grant))
    while len(out) < max_tasks and prefetch_ms > 0:
        found = _early(queue, by_tenant, tenants, now_ms, prefetch_ms, weights)
        if found is None:
            break
        out.append(queue.take_at(found[0], found[0].delayed, found[1], grant))
    return out


def _candidate(queue: ClaimQueue, tier: _Tier, flat: list[Bucket],
               tenants: dict[str, TenantView], now_ms: int) -> tuple | None:
    """The tier's next task in claim order: (eff, key, bucket, j), or None."""
    pick = None
    for j, bucket in enumerate(flat):
        if tenants[bucket.tenant].at_cap():
            continue
        entry = tier.entry(j, bucket)
        if entry is None:
            continue
        key = entry[:3]
        cand = (effective_priority(key[0], now_ms, queue.aging_ms), key, bucket, j)
        if pick is None or queue.before(cand, pick, tenants):
            pick = cand
    return pick


def _take(queue: ClaimQueue, tier: _Tier, cand: tuple, grant: Callable[[Task], None]) -> Task:
    bucket: Bucket = cand[2]
    j: int = cand[3]
    i = tier.index(j, bucket)
    tier.known[j] = False
    return queue.take_at(bucket, bucket.ready, i, grant)


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
