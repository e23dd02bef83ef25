"""Reads of the state: what the node's API and timer ask (docs/internals.md lists them).

Callers hold the replica lock; returned objects are live records and must not be mutated.
Reads change nothing, so they may take the caller's clock (`has_claimable`) where a command
would take its own.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

from .listing import SeqIndex
from .model import PENDING, RETRYING, STATES, Schedule, Task, TenantView
from .pauses import ANY

if TYPE_CHECKING:
    from .machine import StateMachine
    from .store import Store

CURSOR_CHARS_MAX = 300


def get_task(sm: StateMachine, task_id: str, tenant: str | None = None) -> Task | None:
    task = sm.tasks.get(task_id)
    if task is None or (tenant is not None and task.tenant != tenant):
        return None
    return task


def retrying(task: Task) -> bool:
    """The `retrying` view (DESIGN 14.1): a pending task whose retry budget is partly used,
    waiting for its backoff (its run_at, `next_retry_at`) or a worker. Not a state."""
    return task.state == PENDING and task.failures > 0


def status(task: Task) -> str:
    """How a task reads in listings: its state, or `retrying`."""
    return RETRYING if retrying(task) else task.state


class TaskFilter:
    """What a task listing keeps (DESIGN 7): every filter given must match. Times are ms;
    `created_after_ms` and `finished_after_ms` are inclusive, `created_before_ms` exclusive,
    so consecutive windows never share a task."""

    __slots__ = ("state", "tenant", "task_type", "schedule_id", "retrying",
                 "created_after_ms", "created_before_ms", "finished_after_ms")

    def __init__(self, state: str | None = None, tenant: str | None = None,
                 task_type: str | None = None, schedule_id: str | None = None,
                 created_after_ms: int | None = None, created_before_ms: int | None = None,
                 finished_after_ms: int | None = None) -> None:
        self.retrying = state == RETRYING   # the view: the pending tasks that read so
        self.state = PENDING if self.retrying else state
        self.tenant, self.task_type, self.schedule_id = tenant, task_type, schedule_id
        self.created_after_ms, self.created_before_ms = created_after_ms, created_before_ms
        self.finished_after_ms = finished_after_ms

    def match(self, task: Task) -> bool:
        """Every filter but the creation window, which the walk's bounds apply."""
        done = self.finished_after_ms
        return ((self.state is None or task.state == self.state)
                and (self.tenant is None or task.tenant == self.tenant)
                and (self.task_type is None or task.task_type == self.task_type)
                and (self.schedule_id is None or task.schedule_id == self.schedule_id)
                and (not self.retrying or task.failures > 0)
                and (done is None or (task.completed_at_ms is not None
                                      and task.completed_at_ms >= done)))


def list_tasks(sm: StateMachine, where: TaskFilter, cursor: object = None, limit: int = 100,
               scan_max: int | None = None) -> tuple[list[Task], str | None]:
    """Newest first. `cursor` is the opaque `next_cursor` of the previous page (tasks with a
    smaller seq follow); a malformed one raises ValueError (callers answer invalid_argument).

    The smallest of the indexes that hold every match (all, by state, tenant, task type or
    schedule) is walked from the cursor, or from the first task created at or after
    `created_before_ms` (a bisection), and stops at the first created before
    `created_after_ms` (creation times never decrease with seq). At most `scan_max` tasks
    are examined (None: no bound): a page that stops there may hold fewer than `limit`
    tasks, even none, and its cursor goes on after the last task examined. So the cost
    under the replica lock is bounded whatever the filter, and a filter with an index of
    its own costs its page."""
    before = _parse_cursor(cursor)
    if where.state is not None and where.state not in sm.store.by_state:
        raise ValueError(f"unknown state {where.state!r}")
    index = _smallest_index(sm.store, where)
    if where.created_before_ms is not None:
        bound = index.seq_created_before(where.created_before_ms)
        if bound is not None:
            before = bound if before is None else min(before, bound)
    page: list[Task] = []
    limit = max(1, int(limit))
    budget = -1 if scan_max is None else max(1, int(scan_max))
    after = where.created_after_ms
    last = 0
    for task in index.newest_first(before):
        if after is not None and task.created_at_ms < after:
            return page, None   # every task below was created earlier still
        if budget == 0:   # the bound: the next page goes on below the last task examined
            return page, str(last)
        budget -= 1
        last = task.seq
        if where.match(task):
            if len(page) == limit:
                return page, str(page[-1].seq)
            page.append(task)
    return page, None


def _smallest_index(store: Store, where: TaskFilter) -> SeqIndex:
    """The smallest index that holds every task the filter can keep."""
    candidates = [store.all]
    if where.state is not None:
        candidates.append(store.by_state[where.state])
    for indexes, key in ((store.by_tenant, where.tenant), (store.by_type, where.task_type),
                         (store.by_schedule, where.schedule_id)):
        if key is not None:
            candidates.append(indexes.get(key, _EMPTY))
    return min(candidates, key=len)


_EMPTY = SeqIndex()   # the listing of a key no task has; never added to


def _parse_cursor(cursor: object) -> int | None:
    if cursor is None:
        return None
    if type(cursor) is not str or not cursor.isdigit() or len(cursor) > 20:
        raise ValueError("invalid cursor")
    return int(cursor)


def list_schedules(sm: StateMachine, tenant: str | None = None, cursor: object = None,
                   limit: int = 100) -> tuple[list[Schedule], str | None]:
    """Sorted by (tenant, schedule_id); the cursor is the last key of the page."""
    after = None
    if cursor is not None:
        if type(cursor) is not str or "\x1f" not in cursor or len(cursor) > CURSOR_CHARS_MAX:
            raise ValueError("invalid cursor")
        after = tuple(cursor.split("\x1f", 1))
    keys = sorted(k for k in sm.schedules
                  if (tenant is None or k[0] == tenant) and (after is None or k > after))
    limit = max(1, int(limit))
    page = [sm.schedules[k] for k in keys[:limit]]
    more = len(keys) > limit
    return page, ("\x1f".join(keys[limit - 1]) if more else None)


def list_tenants(sm: StateMachine) -> list[TenantView]:
    return [sm.tenants[name] for name in sorted(sm.tenants)]


def next_timer_ms(sm: StateMachine) -> int | None:
    """Earliest instant a Tick changes something: a lease expiry or task timeout, or a
    retention eviction. (A retry's backoff end is the task's run_at: see next_due_ms.)"""
    store, lim = sm.store, sm.limits
    when = []
    if store.leases:
        when.append(store.leases[0][0])
    wake = store.limiter.next_wake_ms()   # a spent rate window or a pause frees
    if wake is not None:
        when.append(wake)
    if store.terminal_count > lim.terminal_tasks_max:
        when.append(sm.now_ms)
    elif store.terminal:
        when.append(store.terminal[0][0] + lim.retention_ms)
    return min(when) if when else None


def due_fires(sm: StateMachine, now_ms: int) -> list[tuple[str, str, int]]:
    """Active schedules whose next fire is at or before now_ms, earliest first: a walk of
    the fire heap's entries up to now_ms (no pops: a read)."""
    store = sm.store
    heap, out, seen = store.fires, [], {}
    frontier = [(heap[0], 0)] if heap else []
    while frontier:
        entry, i = heappop(frontier)
        if entry[0] > now_ms:
            break
        if store.fire_live(entry) and entry not in seen:
            seen[entry] = True
            out.append((entry[1], entry[2], entry[0]))
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                heappush(frontier, (heap[child], child))
    return out


def stats(sm: StateMachine) -> dict:
    store = sm.store
    return {
        "seq": sm.seq,
        "now_ms": sm.now_ms,
        "tasks_by_state": {s: len(store.by_state[s]) for s in STATES},
        "pending_by_priority": dict(enumerate(store.pending_by_priority)),
        "tenants": {v.tenant: {"pending": v.pending, "running": v.running}
                    for v in list_tenants(sm)},
        "schedules": len(sm.schedules),
        "requests": len(sm.requests),
    }


def ready_by_type(sm: StateMachine, now_ms: int) -> dict[str, int]:
    """StateMachine.ready_by_type: due pending tasks per type less those a keyed limit
    holds, and none of a type a pause of the whole type holds (pauses.py). The counts are
    kept per type, so a pause of one tenant's tasks (or of a tenant) is not taken out: its
    due tasks still count (DESIGN 14.4). A tenant at its running cap is not taken out
    either: its tasks are ready for the tenant's next free slot."""
    due = sm.store.due
    due.advance(max(now_ms, sm.now_ms))
    held = sm.store.limiter.held_by_type
    paused = sm.store.pauses.by_key
    out = {}
    for task_type in sorted(due.due):
        if (task_type, ANY) in paused:
            continue
        n = due.due[task_type] - held.get(task_type, 0)
        if n > 0:
            out[task_type] = n
    return out
