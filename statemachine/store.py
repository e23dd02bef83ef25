"""The store: every index derived from the replicated tasks and schedules, in one place.

Replicated state is the records themselves (`tasks`, `tenants`, `schedules` of the
machine). Everything else is derived, and lives here:

- the claim queue (queue.py): pending tasks by (task type, tenant), in claim order;
- the lease heap: running tasks by the instant their lease or timeout ends;
- the retention heap: terminal tasks by completion, oldest evicted first;
- the fire heap: active schedules by their next fire;
- listings (listing.py): every task, by state, by tenant, by task type and (cron
  occurrences) by schedule id, newest first;
- the idempotency map, the live occurrences of each schedule, and counters (per state, per
  tenant, per priority; schedules per tenant).

A task enters through `index` (a submit, a cron fire and a restore alike), changes state
through `move` and leaves through `unindex` (discard, retention). A restore indexes a
million tasks in `bulk` mode: heap entries are appended and each heap is ordered once at
`end_bulk`, instead of pushed one by one. The heaps are deleted from lazily: an entry is
live while it matches its task (`lease_live`, ...), and `tidy` pops dead tops so that reads
peeking at a top see a live one.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Container
from heapq import heapify, heappop, heappush

from .limits import Limits
from .listing import SeqIndex
from .model import LIVE, PENDING, RUNNING, STATES, TERMINAL, Schedule, Task, TenantView
from .pauses import Pauses
from .queue import ClaimQueue
from .ratelimits import Limiter
from .readiness import DueCounts


class Store:
    def __init__(self, limits: Limits, tasks: dict[str, Task], tenants: dict[str, TenantView],
                 schedules: dict[tuple[str, str], Schedule]) -> None:
        self.tasks, self.tenants, self.schedules = tasks, tenants, schedules
        self.queue = ClaimQueue(limits.aging_interval_ms)
        self.limiter = Limiter(limits, self.queue)   # keyed limits (partly replicated)
        self.pauses = Pauses()                        # paused queues (replicated)
        self.queue.paused = self.pauses.by_key        # the claim queue skips their buckets
        self.all = SeqIndex()
        self.by_state = {s: SeqIndex() for s in STATES}
        self.by_tenant: dict[str, SeqIndex] = {}
        # A task's type and schedule never change: these two move only on index / unindex,
        # so a listing by either walks its page, not every task (reads.list_tasks).
        self.by_type: dict[str, SeqIndex] = {}
        self.by_schedule: dict[str, SeqIndex] = {}
        self.idem: dict[tuple[str, str], Task] = {}
        self.leases: list[tuple] = []     # (deadline_ms, token, n, task)
        self.terminal: list[tuple] = []   # (completed_at_ms, seq, n, task)
        self.fires: list[tuple] = []      # (next_fire_ms, tenant, schedule_id)
        self.occurrences: dict[tuple[str, str], dict[str, Task]] = {}
        self.schedules_per_tenant: dict[str, int] = {}
        self.pending_by_priority = [0] * (limits.priority_max + 1)
        self.due = DueCounts()            # pending tasks per type, due or not yet (metrics)
        self.live = 0                     # pending + running tasks
        self.terminal_count = 0
        self.n = 0                        # tie-breaker of heap entries
        self.bulk = False
        # Workflows (workflows.py): the task ids of steps, and the moves of those tasks
        # that their workflows have yet to follow (`settle`, after each command).
        self.watched: Container[str] = {}
        self.moved: deque[Task] = deque()
        # Replicated: the progress its handler last reported of each running task (a
        # heartbeat's, DESIGN 9): task id -> (permille, message, at_ms). Dropped when the
        # attempt ends, so it holds at most the running tasks.
        self.progress: dict[str, tuple[int, str, int]] = {}

    # --- tasks ----------------------------------------------------------------------------
    def index(self, task: Task, now_ms: int) -> None:
        """`task` enters the state (submit, fire, restore): into every index it belongs to.
        The counting and watching of `_count` and `_enter` are inlined here: a restore
        calls this for every task (a million at 1M)."""
        tenant, state = task.tenant, task.state
        if now_ms >= self.due.next_ms:   # once a second at most
            self.due.advance(now_ms)
        self.tasks[task.task_id] = task
        self.all.add(task)
        if task.limits:
            self.limiter.limited[task.task_id] = task
        self.by_state[state].add(task)
        listing = self.by_tenant.get(tenant)
        if listing is None:
            listing = self.by_tenant[tenant] = SeqIndex()
            if tenant not in self.tenants:   # a submit made it; a valid snapshot lists it
                self.tenants[tenant] = TenantView(tenant)
        listing.add(task)
        _listed(self.by_type, task.task_type).add(task)
        if task.idempotency_key is not None:
            self.idem[(tenant, task.idempotency_key)] = task
        if task.schedule_id is not None:
            _listed(self.by_schedule, task.schedule_id).add(task)
            self._occurrence(task, task.schedule_id)
        if state == PENDING:
            self.tenants[tenant].pending += 1
            self.pending_by_priority[task.priority] += 1
            self.due.add(task.task_type, task.run_at_ms, 1)
            self.live += 1
            self.queue.push(task, now_ms)
        elif state == RUNNING:
            self.tenants[tenant].running += 1
            self.live += 1
            self.watch_lease(task)
        else:
            self.terminal_count += 1
            self._enter(task, now_ms)

    def unindex(self, task: Task) -> None:
        """A terminal `task` leaves the state (discard, retention): out of every index."""
        assert task.state in TERMINAL, task
        self._count(task, -1)
        del self.tasks[task.task_id]
        self.all.remove(task)
        if task.limits:
            del self.limiter.limited[task.task_id]
        self.by_state[task.state].remove(task)
        listing = self.by_tenant[task.tenant]
        listing.remove(task)
        if not listing:
            del self.by_tenant[task.tenant]
        _unlisted(self.by_type, task.task_type, task)
        if task.schedule_id is not None:
            _unlisted(self.by_schedule, task.schedule_id, task)
        if task.idempotency_key is not None:
            key = (task.tenant, task.idempotency_key)
            if self.idem.get(key) is task:
                del self.idem[key]

    def move(self, task: Task, new: str, now_ms: int) -> None:
        """`task` changes state to `new` (a lifecycle row's): re-indexed by state."""
        old = task.state
        if now_ms >= self.due.next_ms:   # once a second at most
            self.due.advance(now_ms)
        self._count(task, -1)
        self.by_state[old].remove(task)
        task.state = new
        self.by_state[new].add(task)
        self._count(task, 1)
        if old == RUNNING:
            task.lease_expires_at_ms = None
            if self.progress:
                self.progress.pop(task.task_id, None)   # the attempt's progress ends with it
            if task.limits:
                self.limiter.ended(task)   # its slots free
        elif old == PENDING and new != RUNNING:
            self.queue.dropped(task)   # cancelled while pending: keep the queue's tops live
            if task.limits:
                self.limiter.left_pending(task)
        if new in TERMINAL:
            task.completed_at_ms = now_ms
        elif old in TERMINAL:
            task.completed_at_ms = None
        self._enter(task, now_ms)
        if task.schedule_id is not None:
            self._occurrence(task, task.schedule_id)
        if task.task_id in self.watched:
            self.moved.append(task)

    def _enter(self, task: Task, now_ms: int) -> None:
        """Into the queue or heap of the task's (new) state."""
        state = task.state
        if state == PENDING:
            self.queue.push(task, now_ms)
        elif state == RUNNING:
            self.watch_lease(task)
        else:
            self.n += 1
            entry = (task.completed_at_ms, task.seq, self.n, task)
            if self.bulk:
                self.terminal.append(entry)
            else:
                heappush(self.terminal, entry)

    def _count(self, task: Task, delta: int) -> None:
        state = task.state
        if state == PENDING:
            self.tenants[task.tenant].pending += delta
            self.pending_by_priority[task.priority] += delta
            self.due.add(task.task_type, task.run_at_ms, delta)
            self.live += delta
        elif state == RUNNING:
            self.tenants[task.tenant].running += delta
            self.live += delta
        else:
            self.terminal_count += delta

    def _occurrence(self, task: Task, schedule_id: str) -> None:
        """The live (pending or running) tasks of each schedule (its overlap policy)."""
        key = (task.tenant, schedule_id)
        live = self.occurrences.get(key)
        if task.state in LIVE:
            if live is None:
                live = self.occurrences[key] = {}
            live[task.task_id] = task
        elif live is not None:
            live.pop(task.task_id, None)
            if not live:
                del self.occurrences[key]

    # --- progress (DESIGN 9) ---------------------------------------------------------------
    def progress_records(self) -> list[list]:
        """[task id, permille, message, at_ms] by task id: snapshots and the state digest
        (an empty list: a state that never had progress keeps both as they were)."""
        return [[tid, *self.progress[tid]] for tid in sorted(self.progress)]

    def restore_progress(self, records: object) -> None:
        """The snapshot's `task_progress` (absent: none); only running tasks have one."""
        for tid, permille, message, at_ms in records or ():   # type: ignore[attr-defined]
            task = self.tasks.get(tid)
            if task is None or task.state != RUNNING or type(permille) is not int \
                    or type(message) is not str or type(at_ms) is not int:
                raise ValueError(f"progress of {tid!r}, not a running task")
            self.progress[task.task_id] = (permille, message, at_ms)

    # --- leases ---------------------------------------------------------------------------
    @staticmethod
    def deadline(task: Task) -> int:
        """When a running task's attempt ends unless renewed: lease expiry or timeout."""
        lease, started = task.lease_expires_at_ms, task.started_at_ms
        assert lease is not None and started is not None, task   # set by every claim
        return min(lease, started + task.timeout_ms)

    def watch_lease(self, task: Task) -> None:
        self.n += 1
        entry = (self.deadline(task), task.fencing_token, self.n, task)
        if self.bulk:
            self.leases.append(entry)
        else:
            heappush(self.leases, entry)

    def lease_live(self, entry: tuple) -> bool:
        deadline, token, _, task = entry
        return (task.state == RUNNING and task.fencing_token == token
                and self.deadline(task) == deadline)

    def terminal_live(self, entry: tuple) -> bool:
        task = entry[3]
        return (task.state in TERMINAL and task.completed_at_ms == entry[0]
                and self.tasks.get(task.task_id) is task)

    # --- schedules ------------------------------------------------------------------------
    def index_schedule(self, sched: Schedule) -> None:
        """A new schedule (a first PutSchedule, a restore)."""
        self.schedules[(sched.tenant, sched.schedule_id)] = sched
        self.schedules_per_tenant[sched.tenant] = \
            self.schedules_per_tenant.get(sched.tenant, 0) + 1
        self.watch_fire(sched)

    def unindex_schedule(self, sched: Schedule) -> None:
        del self.schedules[(sched.tenant, sched.schedule_id)]
        left = self.schedules_per_tenant[sched.tenant] - 1
        if left:
            self.schedules_per_tenant[sched.tenant] = left
        else:
            del self.schedules_per_tenant[sched.tenant]

    def watch_fire(self, sched: Schedule) -> None:
        if not sched.paused and sched.next_fire_ms is not None:
            heappush(self.fires, (sched.next_fire_ms, sched.tenant, sched.schedule_id))

    def fire_live(self, entry: tuple) -> bool:
        sched = self.schedules.get((entry[1], entry[2]))
        return sched is not None and not sched.paused and sched.next_fire_ms == entry[0]

    # --- upkeep ---------------------------------------------------------------------------
    def tidy(self) -> None:
        """Keep every heap's top live, so that peeks (next_timer_ms...) are exact."""
        for heap, live in ((self.leases, self.lease_live),
                           (self.terminal, self.terminal_live),
                           (self.fires, self.fire_live)):
            while heap and not live(heap[0]):
                heappop(heap)

    def begin_bulk(self) -> None:
        self.bulk = self.queue.bulk = True

    def end_bulk(self) -> None:
        """Order what `bulk` mode appended (each heap once)."""
        self.bulk = False
        heapify(self.leases)
        heapify(self.terminal)
        self.queue.end_bulk()


def _listed(indexes: dict[str, SeqIndex], key: str) -> SeqIndex:
    """The listing of `key` (a task type, a schedule id), made when its first task enters."""
    listing = indexes.get(key)
    if listing is None:
        listing = indexes[key] = SeqIndex()
    return listing


def _unlisted(indexes: dict[str, SeqIndex], key: str, task: Task) -> None:
    """`task` leaves the listing of `key`; an empty listing goes, so the dict stays bounded by
    the retained tasks' distinct keys."""
    listing = indexes[key]
    listing.remove(task)
    if not listing:
        del indexes[key]
