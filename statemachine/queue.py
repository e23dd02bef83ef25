"""The claim queue: which pending task a Claim gets, in O(log n) per claimed task.

Pending tasks sit in one `Bucket` per (tenant, task_type), in two heaps:
- `ready`: due tasks keyed by (static_key, run_at_ms, seq), the claim order of DESIGN
  section 5 (static_key folds aging into the priority, so keys never need updating);
- `delayed`: tasks not yet due, keyed by (run_at_ms, seq); they move to `ready` lazily, the
  first time a claim looks at their bucket after the clock passed them.

A claim looks at the top of each bucket of its task types (one per tenant with work of that
type), skips tenants at their running cap without touching their backlog, and compares
the tops: lowest effective priority, then least service per weight (fair share), then the
task key. The per-claim cost is proportional to the buckets of the requested types and
logarithmic in the number of pending tasks.

Entries are deleted lazily: an entry is live iff its task is still pending and its `qver`
(bumped at every enqueue) matches. Each heap's top is kept live (`_clean`) whenever a task
leaves pending by another way than being popped, so that peeks (`has_claimable`,
`next_due_ms`) are exact. None of this is replicated state: it is rebuilt from the tasks.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from heapq import heapify, heappop, heappush

from .model import PENDING, Task, TenantView
from .ranges import delayed_in, key_bounds, live, pop_at, ready_in
from .rules import effective_priority, static_key


class Bucket:
    __slots__ = ("tenant", "task_type", "ready", "delayed")

    def __init__(self, tenant: str, task_type: str) -> None:
        self.tenant = tenant
        self.task_type = task_type
        self.ready: list[tuple] = []     # (static_key, run_at_ms, seq, qver, task)
        self.delayed: list[tuple] = []   # (run_at_ms, seq, qver, task)


class ClaimQueue:
    def __init__(self, aging_interval_ms: int) -> None:
        self.aging_ms = aging_interval_ms
        self.by_type: dict[str, dict[str, Bucket]] = {}
        self.bulk = False
        self.unsorted: dict[int, Bucket] = {}   # buckets appended to in bulk mode

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
        entry: tuple   # ready: (static_key, run_at_ms, seq, qver, task); delayed: no key
        if run_at <= now_ms:
            key = task.priority * self.aging_ms + run_at   # rules.static_key, inlined: a
            if key < 0:                                    # restore pushes every task
                key = 0
            entry, heap = (key, run_at, task.seq, task.qver, task), bucket.ready
        else:
            entry, heap = (run_at, task.seq, task.qver, task), bucket.delayed
        if self.bulk:
            heap.append(entry)
            self.unsorted[id(bucket)] = bucket
        else:
            heappush(heap, entry)

    def end_bulk(self) -> None:
        """Order the heaps `push` appended to in bulk mode (a restore), each once."""
        self.bulk = False
        for bucket in self.unsorted.values():
            heapify(bucket.ready)
            heapify(bucket.delayed)
        self.unsorted.clear()

    def dropped(self, task: Task) -> None:
        """A task left pending by cancellation or the like: keep its bucket's tops live."""
        bucket = self.by_type.get(task.task_type, {}).get(task.tenant)
        if bucket is not None:
            self._clean(bucket)

    def clean(self, bucket: Bucket) -> None:
        """Keep a bucket's tops live after entries died in place; forget it once empty."""
        self._clean(bucket)

    def _clean(self, bucket: Bucket) -> None:
        while bucket.ready and not live(bucket.ready[0]):
            heappop(bucket.ready)
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
                heappush(bucket.ready, (key, run_at, seq, qver, task))
        self._clean(bucket)

    def _buckets(self, task_types, tenant: str | None) -> list[Bucket]:
        found: list[Bucket] = []
        for task_type in dict.fromkeys(task_types):   # duplicates once, in the given order
            buckets = self.by_type.get(task_type)
            if not buckets:
                continue
            if tenant is None:
                found.extend(buckets.values())
            elif tenant in buckets:
                found.append(buckets[tenant])
        return found

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
            task = heappop(bucket.ready)[-1]
            self._clean(bucket)
            grant(task)
            out.append(task)
            self._offer(best, bucket.tenant, by_tenant[bucket.tenant], tenants, now_ms)
        while len(out) < max_tasks and prefetch_ms > 0:
            task = self._select_early(by_tenant, tenants, now_ms + prefetch_ms)
            if task is None:
                break
            grant(task)
            out.append(task)
        return out

    def gather(self, task_types: Sequence[str], tenant: str | None,
               now_ms: int) -> dict[str, list[Bucket]]:
        """A claim's buckets by tenant, their due tasks moved to `ready`."""
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
            task = heappop(ready)[-1]
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
        out: list[Task] = []
        while len(out) < max_tasks:
            pick = None
            for name, buckets in by_tenant.items():
                if tenants[name].at_cap():
                    continue
                for bucket in buckets:
                    i = ready_in(bucket.ready, lo, hi)
                    if i < 0:
                        continue
                    key = bucket.ready[i][:3]
                    cand = (effective_priority(key[0], now_ms, self.aging_ms), key, bucket, i)
                    if pick is None or self.before(cand, pick, tenants):
                        pick = cand
            if pick is None:
                break
            out.append(self.take_at(pick[2], pick[2].ready, pick[3], grant))
        while len(out) < max_tasks and prefetch_ms > 0:
            found = self.early_in_range(by_tenant, tenants, now_ms, prefetch_ms, priorities)
            if found is None:
                break
            out.append(self.take_at(found[0], found[0].delayed, found[1], grant))
        return out

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

    def take_at(self, bucket: Bucket, heap: list, i: int,
                 grant: Callable[[Task], None]) -> Task:
        task = heap[i][-1]
        pop_at(heap, i)
        self._clean(bucket)
        grant(task)
        return task

    # --- peeks (reads: no mutation) -------------------------------------------------------
    def has_claimable(self, task_types, tenant: str | None, tenants: dict[str, TenantView],
                      now_ms: int, prefetch_ms: int,
                      priorities: tuple[int, int] = (0, 10)) -> bool:
        horizon = now_ms + max(0, prefetch_ms)
        ranged = priorities[0] > 0 or priorities[1] < 10
        lo, hi = key_bounds(priorities, now_ms, self.aging_ms)
        for bucket in self._buckets(task_types, tenant):
            if tenants[bucket.tenant].at_cap():
                continue
            if ranged:
                if (ready_in(bucket.ready, lo, hi) >= 0 or delayed_in(
                        bucket.delayed, now_ms, horizon, lo, hi, priorities, self.aging_ms) >= 0):
                    return True
                continue
            if bucket.ready and bucket.ready[0][1] <= horizon:
                return True
            if bucket.delayed and bucket.delayed[0][0] <= horizon:
                return True
        return False

    def next_due_ms(self, task_types, tenant: str | None, now_ms: int) -> int | None:
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
