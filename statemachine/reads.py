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


def list_tasks(sm: StateMachine, state: str | None = None, tenant: str | None = None,
               task_type: str | None = None, schedule_id: str | None = None,
               cursor: object = None, limit: int = 100) -> tuple[list[Task], str | None]:
    """Newest first. `cursor` is the opaque `next_cursor` of the previous page; a malformed
    one raises ValueError (callers answer invalid_argument). The smallest of the state /
    tenant indexes is walked; other filters are checked per task. `state` may be the view
    `retrying`: the pending index is walked and kept are the tasks that read so."""
    before = _parse_cursor(cursor)
    store = sm.store
    view = state == RETRYING
    if view:
        state = PENDING
    if state is not None and state not in store.by_state:
        raise ValueError(f"unknown state {state!r}")
    candidates = [store.all]
    if state is not None:
        candidates.append(store.by_state[state])
    if tenant is not None:
        candidates.append(store.by_tenant.get(tenant, SeqIndex()))
    index = min(candidates, key=len)
    page: list[Task] = []
    limit = max(1, int(limit))
    for task in index.newest_first(before):
        if ((state is None or task.state == state)
                and (tenant is None or task.tenant == tenant)
                and (task_type is None or task.task_type == task_type)
                and (schedule_id is None or task.schedule_id == schedule_id)
                and (not view or task.failures > 0)):
            if len(page) == limit:
                return page, str(page[-1].seq)
            page.append(task)
    return page, None


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
