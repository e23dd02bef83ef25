"""The claim queue: which pending task a Claim gets, in O(log n) per claimed task.

Pending tasks sit in one `Bucket` per (tenant, task_type):
- `bands`: due tasks, one heap per STATIC priority, keyed by (static_key, run_at_ms, seq),
  the claim order of DESIGN section 5 (static_key folds aging into the priority, so keys
  never need updating);
- `ready`: a small heap of the bands' tops (the same tuples), one per non-empty band, so
  its top is the bucket's next task in claim order;
- `delayed`: tasks not yet due, keyed by (run_at_ms, seq); they move to their band lazily,
  the first time a claim looks at their bucket after the clock passed them.

A claim by priority range with a lower bound walks only the bands that can hold a task in
range (a task's effective priority is at most its static one: `band_max`), so the tasks of
more urgent static priorities cost it nothing (ranges.band_in).

A claim looks at the top of each bucket of its task types (one per tenant with work of that
type), skips tenants at their running cap without touching their backlog, and compares
the tops: lowest effective priority, then least service per weight (fair share), then the
task key. The per-claim cost is proportional to the buckets of the requested types and
logarithmic in the number of pending tasks.

Entries are deleted lazily: an entry is live iff its task is still pending and its `qver`
(bumped at every enqueue) matches. Each band's top, hence `ready`, is kept live whenever a
task leaves pending by another way than being popped (`dropped`, `_fix_band`), so that
peeks (`has_claimable`, `next_due_ms`) are exact. None of this is replicated state: it is
rebuilt from the tasks; the choice never depends on a heap's layout (keys are unique).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from heapq import heapify, heappop, heappush

from . import bands
from .bands import Bucket
from .model import PENDING, Task, TenantView
from .ranges import band_in, delayed_in, key_bounds, live, pop_at
from .rules import effective_priority, static_key

__all__ = ["Bucket", "ClaimQueue"]


class ClaimQueue:
    def __init__(self, aging_interval_ms: int) -> None:
        self.aging_ms = aging_interval_ms
        self.by_type: dict[str, dict[str, Bucket]] = {}
        self.bulk = False
        self.unsorted: dict[int, Bucket] = {}   # buckets appended to in bulk mode
        # The standing pauses by (task type, tenant), "" for any (pauses.py; the store
        # shares its dict): their buckets are left out of every claim (`_buckets`).
        self.paused: Mapping[tuple[str, str], object] = {}

    # --- membership -----------------------------------------------------------------------
    def push(self, task: Task, now_ms: int) -> None:
        """Enqueue a task that just became pending. In bulk mode (a restore) the entry is
        appended, and `end_bulk` orders each heap once."""
        task.qver += 1
        buckets = self.by_type.get(task.task_type)
        if buckets is None:
            buckets = self.by_type[task.task_type] = {}
        bucket = buckets.get(task.tenant)
        if bucket is None:
            bucket = buckets[task.tenant] = Bucket(task.tenant, task.task_type)
        run_at = task.run_at_ms
        if run_at > now_ms:
            later = (run_at, task.seq, task.qver, task)
            if self.bulk:
                bucket.delayed.append(later)
                self.unsorted[id(bucket)] = bucket
            else:
                heappush(bucket.delayed, later)
            return
        key = task.priority * self.aging_ms + run_at   # rules.static_key, inlined: a
        if key < 0:                                    # restore pushes every task
            key = 0
        entry = (key, run_at, task.seq, task.qver, task)
        p = task.priority
        if self.bulk:
            bands.band(bucket, p, key).append(entry)
            self.unsorted[id(bucket)] = bucket
            return
        if p < len(bucket.bands):
            heap = bucket.bands[p]
            if heap and entry > heap[0]:   # the usual case, bands.push inlined: not a new top
                heappush(heap, entry)
                if key > bucket.band_max[p]:
                    bucket.band_max[p] = key
                return
        bands.push(bucket, entry, p, key)

    def end_bulk(self) -> None:
        """Order the heaps `push` appended to in bulk mode (a restore), each once."""
        self.bulk = False
        for bucket in self.unsorted.values():
            for band in bucket.bands:
                heapify(band)
            bands.reps(bucket)
            heapify(bucket.delayed)
        self.unsorted.clear()

    def dropped(self, task: Task) -> None:
        """A task left pending by cancellation or the like: keep its bucket's tops live."""
        bucket = self.by_type.get(task.task_type, {}).get(task.tenant)
        if bucket is not None:
            p = task.priority
            band = bucket.bands[p] if p < len(bucket.bands) else []
            if band and not live(band[0]):
                bands.fix_band(bucket, p, band[0])
            self._clean(bucket)

    @staticmethod
    def reps(bucket: Bucket) -> None:
        bands.reps(bucket)

    def clean(self, bucket: Bucket) -> None:
        """Keep a bucket's tops live after entries died in place; forget it once empty."""
        self._clean(bucket)

    def _clean(self, bucket: Bucket) -> None:
        if bucket.ready and not live(bucket.ready[0]):
            bands.reps(bucket)
        while bucket.delayed and not live(bucket.delayed[0]):
            heappop(bucket.delayed)
        if not bucket.ready and not bucket.delayed:
            buckets = self.by_type[bucket.task_type]
            del buckets[bucket.tenant]
            if not buckets:
                del self.by_type[bucket.task_type]

    def _promote(self, bucket: Bucket, now_ms: int) -> None:
        delayed = bucket.delayed
        while delayed and delayed[0][0] <= now_ms:
            run_at, seq, qver, task = heappop(delayed)
            if task.state == PENDING and task.qver == qver:
                key = static_key(task.priority, run_at, self.aging_ms)
                bands.push(bucket, (key, run_at, seq, qver, task), task.priority, key)
        self._clean(bucket)

    def _buckets(self, task_types: Iterable[str], tenant: str | None) -> list[Bucket]:
        """The buckets a claim of these types (and tenant) looks at: every claim path and
        peek gathers here, so a paused bucket (pauses.py) is left out here alone, at one
        or two lookups per bucket and none while nothing is paused."""
        found: list[Bucket] = []
        paused = self.paused
        for task_type in dict.fromkeys(task_types):   # duplicates once, in the given order
            buckets = self.by_type.get(task_type)
            if not buckets:
                continue
            if paused:
                found.extend(self._unpaused(buckets, task_type, tenant))
            elif tenant is None:
                found.extend(buckets.values())
            elif tenant in buckets:
                found.append(buckets[tenant])
        return found

    def _unpaused(self, buckets: dict[str, Bucket], task_type: str,
                  tenant: str | None) -> list[Bucket]:
        paused = self.paused
        if (task_type, "") in paused:
            return []
        if tenant is not None:
            bucket = buckets.get(tenant)
            return [] if bucket is None or self.is_paused(task_type, tenant) else [bucket]
        return [b for name, b in buckets.items()
                if (task_type, name) not in paused and ("", name) not in paused]

    def is_paused(self, task_type: str, tenant: str) -> bool:
        """A pause covers this (task type, tenant) bucket (pauses.py: "" is any)."""
        paused = self.paused
        return bool(paused) and ((task_type, tenant) in paused or (task_type, "") in paused
                                 or ("", tenant) in paused)

    # --- selection ------------------------------------------------------------------------
    def select(self, task_types: Sequence[str], tenant: str | None,
               tenants: dict[str, TenantView], now_ms: int, prefetch_ms: int, max_tasks: int,
               grant: Callable[[Task], None],
               priorities: tuple[int, int] = (0, 10)) -> list[Task]:
        """Remove up to `max_tasks` tasks in claim order, calling `grant(task)` on each
        before choosing the next (a grant changes the tenant's service and running count).

        Each tenant's best top is computed once per claim, then only the tenant that was
        just served is recomputed: O(buckets) per claim plus O(tenants) per task granted.
        """
        by_tenant = self.gather(task_types, tenant, now_ms)
        if priorities[0] > 0 or priorities[1] < 10:
            return self._select_range(by_tenant, tenants, now_ms, prefetch_ms, max_tasks,
                                      grant, priorities)
        best: dict[str, tuple] = {}
        for name, buckets in by_tenant.items():
            self._offer(best, name, buckets, tenants, now_ms)
        out: list[Task] = []
        while len(out) < max_tasks and best:
            if len(best) == 1:
                only = next(iter(best))
                if len(by_tenant[only]) == 1:
                    self._take_from_one(by_tenant[only][0], tenants[only], max_tasks, grant, out)
                    break
            pick = None
            for cand in best.values():
                if pick is None or self.before(cand, pick, tenants):
                    pick = cand
            assert pick is not None   # `best` is not empty
            bucket = pick[2]
            task = bands.pop(bucket)
            self._clean(bucket)
            grant(task)
            out.append(task)
            self._offer(best, bucket.tenant, by_tenant[bucket.tenant], tenants, now_ms)
        while len(out) < max_tasks and prefetch_ms > 0:
            early = self._select_early(by_tenant, tenants, now_ms + prefetch_ms)
            if early is None:
                break
            grant(early)
            out.append(early)
        return out

    def gather(self, task_types: Sequence[str], tenant: str | None,
               now_ms: int) -> dict[str, list[Bucket]]:
        """A claim's buckets by tenant, their due tasks moved to their bands."""
        by_tenant: dict[str, list[Bucket]] = {}
        for bucket in self._buckets(task_types, tenant):
            if bucket.delayed and bucket.delayed[0][0] <= now_ms:
                self._promote(bucket, now_ms)
            by_tenant.setdefault(bucket.tenant, []).append(bucket)
        return by_tenant

    def _take_from_one(self, bucket: Bucket, view: TenantView, max_tasks: int,
                       grant: Callable[[Task], None], out: list[Task]) -> None:
        """The claim order when one tenant's one bucket is all there is: its heap order, up
        to the tenant's cap (what comparing offers task by task would pick, without it)."""
        ready = bucket.ready
        while len(out) < max_tasks and ready and not view.at_cap():
            task = bands.pop(bucket)
            self._clean(bucket)
            grant(task)
            out.append(task)

    def _offer(self, best: dict, name: str, buckets: list[Bucket],
               tenants: dict[str, TenantView], now_ms: int) -> None:
        """Set `best[name]` to the tenant's best ready top (eff, key, bucket), or drop it."""
        best.pop(name, None)
        if tenants[name].at_cap():
            return
        top = None
        for bucket in buckets:
            if bucket.ready and (top is None or bucket.ready[0][:3] < top[1]):
                top = (0, bucket.ready[0][:3], bucket)
        if top is not None:
            best[name] = (effective_priority(top[1][0], now_ms, self.aging_ms),) + top[1:]

    @staticmethod
    def before(a: tuple, b: tuple, tenants: dict[str, TenantView]) -> bool:
        """Claim order between two tenants' candidates (eff, key, bucket)."""
        if a[0] != b[0]:
            return a[0] < b[0]
        ta, tb = tenants[a[2].tenant], tenants[b[2].tenant]
        # fair share: least service per weight, compared in integers (sa/wa < sb/wb)
        lhs, rhs = ta.service * tb.weight, tb.service * ta.weight
        if lhs != rhs:
            return lhs < rhs
        return a[1] < b[1]

    def _select_early(self, by_tenant: dict[str, list[Bucket]],
                      tenants: dict[str, TenantView], horizon_ms: int) -> Task | None:
        """Early dispatch: the due-soon task with the earliest (run_at, seq)."""
        best = None
        for name, buckets in by_tenant.items():
            if tenants[name].at_cap():
                continue
            for bucket in buckets:
                top = bucket.delayed[0] if bucket.delayed else None
                if top is not None and top[0] <= horizon_ms and (
                        best is None or top[:2] < best.delayed[0][:2]):
                    best = bucket
        if best is None:
            return None
        task = heappop(best.delayed)[-1]
        self._clean(best)
        return task

    # --- claims by priority range (DESIGN section 5) -------------------------------------
    def _select_range(self, by_tenant: dict[str, list[Bucket]],
                      tenants: dict[str, TenantView], now_ms: int, prefetch_ms: int,
                      max_tasks: int, grant: Callable[[Task], None],
                      priorities: tuple[int, int]) -> list[Task]:
        """`select` for a claim that takes only effective priorities in `priorities`: the
        same order, over the entries whose key falls in the range's key bounds."""
        lo, hi = key_bounds(priorities, now_ms, self.aging_ms)
        flat = [b for buckets in by_tenant.values() for b in buckets]
        cands = [self._in_range(b, lo, hi, now_ms) for b in flat]   # only a take changes one
        out: list[Task] = []
        at = -1
        while len(out) < max_tasks:
            if at >= 0:   # the bucket taken from, found again only when a task is wanted
                cands[at] = self._in_range(flat[at], lo, hi, now_ms)
            pick = None
            at = -1
            for k, cand in enumerate(cands):
                if cand is None or tenants[flat[k].tenant].at_cap():
                    continue
                if pick is None or self.before(cand, pick, tenants):
                    pick, at = cand, k
            if pick is None:
                break
            out.append(self.take_band(flat[at], pick[3], pick[4], grant))
        while len(out) < max_tasks and prefetch_ms > 0:
            found = self.early_in_range(by_tenant, tenants, now_ms, prefetch_ms, priorities)
            if found is None:
                break
            out.append(self.take_at(found[0], found[0].delayed, found[1], grant))
        return out

    def _in_range(self, bucket: Bucket, lo: int, hi: int, now_ms: int) -> tuple | None:
        """The bucket's least entry in the key range as a candidate (eff, key, bucket, band,
        index), or None."""
        p, i = band_in(bucket.ready, bucket.bands, bucket.band_max, lo, hi)
        if i < 0:
            return None
        key = bucket.bands[p][i][:3]
        return (effective_priority(key[0], now_ms, self.aging_ms), key, bucket, p, i)

    def early_in_range(self, by_tenant: dict[str, list[Bucket]],
                       tenants: dict[str, TenantView], now_ms: int, prefetch_ms: int,
                       priorities: tuple[int, int]) -> tuple[Bucket, int] | None:
        """Early dispatch within a range: the bucket and index of the due-soon entry with
        the earliest (run_at, seq) whose priority is in range, or None."""
        lo, hi = key_bounds(priorities, now_ms, self.aging_ms)
        horizon = now_ms + prefetch_ms
        found = None
        for name, buckets in by_tenant.items():
            if tenants[name].at_cap():
                continue
            for bucket in buckets:
                i = delayed_in(bucket.delayed, now_ms, horizon, lo, hi, priorities,
                               self.aging_ms)
                if i >= 0 and (found is None or
                               bucket.delayed[i][:2] < found[0].delayed[found[1]][:2]):
                    found = (bucket, i)
        return found

    def take_band(self, bucket: Bucket, p: int, i: int,
                  grant: Callable[[Task], None]) -> Task:
        """Take entry `i` of band `p` (removed from inside the band; `ready` follows)."""
        band = bucket.bands[p]
        old = band[0]
        task = band[i][-1]
        pop_at(band, i)
        if not band or band[0] is not old:
            bands.fix_band(bucket, p, old)
        self._clean(bucket)
        grant(task)
        return task

    def take_at(self, bucket: Bucket, heap: list, i: int,
                 grant: Callable[[Task], None]) -> Task:
        task = heap[i][-1]
        pop_at(heap, i)
        self._clean(bucket)
        grant(task)
        return task

    # --- peeks (reads: no mutation) -------------------------------------------------------
    def has_claimable(self, task_types: Iterable[str], tenant: str | None,
                      tenants: dict[str, TenantView],
                      now_ms: int, prefetch_ms: int,
                      priorities: tuple[int, int] = (0, 10)) -> bool:
        horizon = now_ms + max(0, prefetch_ms)
        ranged = priorities[0] > 0 or priorities[1] < 10
        lo, hi = key_bounds(priorities, now_ms, self.aging_ms)
        for bucket in self._buckets(task_types, tenant):
            if tenants[bucket.tenant].at_cap():
                continue
            if ranged:
                if band_in(bucket.ready, bucket.bands, bucket.band_max, lo, hi)[1] >= 0:
                    return True
                if delayed_in(bucket.delayed, now_ms, horizon, lo, hi, priorities,
                              self.aging_ms) >= 0:
                    return True
                continue
            if bucket.ready and bucket.ready[0][1] <= horizon:
                return True
            if bucket.delayed and bucket.delayed[0][0] <= horizon:
                return True
        return False

    def next_due_ms(self, task_types: Iterable[str], tenant: str | None, now_ms: int) -> int | None:
        """Earliest run_at among pending tasks of these types, clamped up to `now_ms`: a
        due task reads as now (ready heaps are ordered by priority, not run_at)."""
        best = None
        for bucket in self._buckets(task_types, tenant):
            if bucket.ready:
                return now_ms
            at = bucket.delayed[0][0]
            if best is None or at < best:
                best = at
        return None if best is None else max(best, now_ms)
