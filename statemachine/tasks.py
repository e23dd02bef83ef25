"""Handlers that act on a task as a whole: submit, cancel, replay, discard, and the
retention that evicts finished tasks; and the helpers every task handler uses.

Each handler validates its command, finds the task, asks the lifecycle table (lifecycle.py) which row the
event takes, then makes that row's change through the store (store.py).
"""
from __future__ import annotations

import sys
from heapq import heappop
from typing import TYPE_CHECKING

from . import audit
from . import commands as c
from . import validate as V
from .errors import CONFLICT, INVALID_ARGUMENT, NOT_FOUND
from .lifecycle import CANCEL, DISCARD, REPLAY, decide
from .model import RUNNING, Task
from .results import Answer, task_answer
from .tenants import check_admission, check_capacity, tenant
from .validate import Rejected

if TYPE_CHECKING:
    from .machine import StateMachine


# --- helpers ---------------------------------------------------------------------------------

def find(sm: StateMachine, task_id: str, scope: str | None) -> Task:
    """The task; `not_found` for another tenant's (scope given)."""
    task = sm.tasks.get(task_id)
    if task is None or (scope is not None and task.tenant != scope):
        raise Rejected(NOT_FOUND, f"task {task_id} not found", task_id=task_id)
    return task


def add(sm: StateMachine, task: Task) -> None:
    """A new task enters the state (submit, a schedule's fire)."""
    tenant(sm, task.tenant)
    sm.store.index(task, sm.now_ms)


def remove(sm: StateMachine, task: Task) -> None:
    """A terminal task leaves the state (discard, retention)."""
    sm.store.unindex(task)


# --- handlers --------------------------------------------------------------------------------

def submit(sm: StateMachine, cmd: c.SubmitTask) -> Answer:
    """A repeated idempotency_key returns the existing task with duplicate=True even if
    the other fields differ: the key names the request, not its content."""
    V.submit(cmd, sm.limits, sm.now_ms)
    name = sys.intern(cmd.tenant)
    if cmd.idempotency_key is not None:
        existing = sm.store.idem.get((name, cmd.idempotency_key))
        if existing is not None:
            return task_answer(existing.task_id, True)
    if cmd.task_id in sm.tasks:
        raise Rejected(CONFLICT, f"task {cmd.task_id} already exists", task_id=cmd.task_id)
    if cmd.limits:
        _check_limits(sm, cmd.limits)
    check_admission(sm, cmd.priority)
    check_capacity(sm, name)
    sm.task_seq += 1
    run_at = cmd.run_at_ms if cmd.run_at_ms is not None else sm.now_ms
    task = Task(cmd.task_id, name, sys.intern(cmd.task_type), cmd.payload_json,
                cmd.priority, run_at, cmd.max_retries, cmd.retry, cmd.timeout_ms,
                cmd.idempotency_key, None, sm.now_ms, sm.task_seq)
    if cmd.limits:
        task.limits = tuple(sys.intern(n) for n in cmd.limits)
    task.traceparent = cmd.traceparent
    add(sm, task)
    return task_answer(task.task_id, False)


def _check_limits(sm: StateMachine, names: tuple[str, ...]) -> None:
    """A submit naming an unknown limit is refused, naming it (ratelimits.py)."""
    unknown = [n for n in names if n not in sm.store.limiter.defs]
    if unknown:
        raise Rejected(INVALID_ARGUMENT, f"unknown limit {unknown[0]!r} (declare it with "
                       f"PUT /v1/limits/{unknown[0]})", field="limits", limit=unknown[0])


def cancel(sm: StateMachine, cmd: c.Cancel) -> Answer:
    """Pending: cancelled now. Running: cancel requested; the attempt's end cancels it."""
    V.task_ref(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    row = decide(task, CANCEL)
    before = task.state
    if row.new == RUNNING:
        task.cancel_requested = True
    else:
        sm.store.move(task, row.new, sm.now_ms)
    _audit(sm, cmd, "task.cancel", task, before)
    return task_answer(task.task_id)


def _audit(sm: StateMachine, cmd: c.Command, action: str, task: Task, before: str) -> None:
    change = audit.task_change(before, task)
    step = sm.workflows.step_of.get(task.task_id)
    if step is not None:   # a workflow's step: the entry names the workflow (DESIGN 5.2)
        change["workflow"] = {"workflow_id": step[0].workflow_id,
                              "step": step[0].steps[step[1]].name}
    audit.record(sm, cmd, action, task.tenant, task.task_id, change)


def replay(sm: StateMachine, cmd: c.Replay) -> Answer:
    """A dead letter back to pending, due now, with its retry budget restored."""
    V.task_ref(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    row = decide(task, REPLAY)
    check_capacity(sm, task.tenant)
    task.failures = 0
    task.cancel_requested = False
    task.run_at_ms = sm.now_ms
    before = task.state
    sm.store.move(task, row.new, sm.now_ms)
    _audit(sm, cmd, "task.replay", task, before)
    return task_answer(task.task_id)


def discard(sm: StateMachine, cmd: c.Discard) -> Answer:
    """A dead letter to `discarded`: kept, with its attempts, for audit until retention
    (counted from now) evicts it. (A discard answered before this state existed was a
    `gone_task` answer; the request table may still hold one: results.py renders it.)"""
    V.task_ref(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    row = decide(task, DISCARD)
    before = task.state
    sm.store.move(task, row.new, sm.now_ms)
    _audit(sm, cmd, "task.discard", task, before)
    return task_answer(task.task_id)


def evict(sm: StateMachine) -> list[Task]:
    """Retention (on Tick): finished tasks older than `retention_ms`, or the oldest beyond
    `terminal_tasks_max`, at most `evictions_per_tick_max` per tick. Returns them, oldest
    first (the node archives them)."""
    store, lim = sm.store, sm.limits
    heap = store.terminal
    cutoff = sm.now_ms - lim.retention_ms
    budget = lim.evictions_per_tick_max
    evicted: list[Task] = []
    while heap and budget > 0:
        if not store.terminal_live(heap[0]):
            heappop(heap)
            continue
        if heap[0][0] > cutoff and store.terminal_count <= lim.terminal_tasks_max:
            break
        task = heappop(heap)[3]
        remove(sm, task)
        evicted.append(task)
        budget -= 1
    return evicted
