"""Answers: what a handler returns, typed, and how it becomes a `Result`.

The request table keeps each command's answer so that a repeated `request_id` gets the
first answer again (DESIGN section 5). An answer is kept as a *row*, a 5-tuple
`(code, message, details, kind, data)`: snapshots store rows (`codec.request_record`) and
the digest hashes them, so their shape is a stored format. The functions below build
those rows from named fields (`task_answer(task_id, duplicate)` is the row
`("ok", "", None, "task", [task_id, duplicate])`), and `render` dispatches on the row's
`kind`, so a row read back from a snapshot renders as the one first kept. (A `gone_task`
row is no longer made, a discard now keeps its task, but a table may still hold one.)

An answer names records by key, not by reference: rendered after the fact (a repeat), it
shows the record as it is now (or `not_found` once it is gone); answers about a removed
record (discard, delete) carry the record itself.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import codec
from .errors import NOT_FOUND, OK, Result
from .pauses import Pause
from .ratelimits import LimitDef

if TYPE_CHECKING:
    from .machine import StateMachine


# An answer row: (code, message, details, kind, data), built by the functions below.
Answer = tuple[str, str, dict | None, str | None, Any]


def refused(code: str, message: str, details: dict | None) -> Answer:
    """A rejection: its code, message and details (nothing changed)."""
    return (code, message, details or None, None, None)


def task_answer(task_id: str, duplicate: bool | None = None) -> Answer:
    return (OK, "", None, "task", [task_id, duplicate])


def tasks_answer(task_ids: list[str]) -> Answer:
    """The tasks a Claim granted, by id."""
    return (OK, "", None, "tasks", task_ids)


def lease_answer(lease_expires_at_ms: int, cancel_requested: bool) -> Answer:
    return (OK, "", None, "lease", [lease_expires_at_ms, cancel_requested])


def tenant_answer(tenant: str) -> Answer:
    return (OK, "", None, "tenant", tenant)


def schedule_answer(tenant: str, schedule_id: str) -> Answer:
    return (OK, "", None, "schedule", [tenant, schedule_id])


def fire_answer(tenant: str, schedule_id: str, task_id: str | None) -> Answer:
    """A Fire: the schedule, and the task it made (or None)."""
    return (OK, "", None, "fire", [tenant, schedule_id, task_id])


def gone_schedule_answer(record: list) -> Answer:
    """A deleted schedule, as its record."""
    return (OK, "", None, "gone_schedule", record)


def evicted_answer(tasks: list) -> Answer:
    """A Tick that evicted finished tasks: the records that left the state, so that a node
    can archive them (DESIGN 14.3) without the state machine doing I/O. Only Ticks answer
    so, and Ticks are never recorded in the request table: these rows are never stored."""
    return (OK, "", None, "evicted", tasks)


def limit_answer(name: str) -> Answer:
    return (OK, "", None, "limit", name)


def gone_limit_answer(record: list) -> Answer:
    """A deleted limit, as its record."""
    return (OK, "", None, "gone_limit", record)


DONE: Answer = (OK, "", None, None, None)   # success with no value (Tick, Barrier)


# --- rendering: a row (fresh or restored) -> Result ------------------------------------------

def render(sm: StateMachine, row: tuple) -> Result:
    code, message, details, kind, data = row
    if code != OK:
        return Result(code, message, None, dict(details or {}))
    if kind == "task":   # most answers (submit, complete): rendered inline, one call less
        task = sm.tasks.get(data[0])
        if task is not None:
            value = {"task": task}
            if data[1] is not None:
                value["duplicate"] = data[1]
            return Result(OK, "", value, {})
    return _RENDER[kind](sm, data)


def _done(sm: StateMachine, data: Any) -> Result:
    return Result(OK, "", None, {})


def _task(sm: StateMachine, data: Any) -> Result:
    task = sm.tasks.get(data[0])
    if task is None:
        return Result(NOT_FOUND, f"task {data[0]} is no longer retained", None,
                      {"task_id": data[0]})
    value = {"task": task}
    if data[1] is not None:
        value["duplicate"] = data[1]
    return Result(OK, "", value, {})


def _tasks(sm: StateMachine, data: Any) -> Result:
    tasks = sm.tasks
    return Result(OK, "", {"tasks": [tasks[t] for t in data if t in tasks]}, {})


def _lease(sm: StateMachine, data: Any) -> Result:
    return Result(OK, "", {"lease_expires_at_ms": data[0], "cancel_requested": data[1]}, {})


def _tenant(sm: StateMachine, data: Any) -> Result:
    return Result(OK, "", {"tenant": sm.tenants[data]}, {})


def _gone_task(sm: StateMachine, data: Any) -> Result:
    return Result(OK, "", {"task": codec.task_from(data, {})}, {})


def _evicted(sm: StateMachine, data: Any) -> Result:
    """The evicted tasks; `steps` names the workflow and step of those that are a
    workflow's steps (the archive's records say so, DESIGN 5.2)."""
    value: dict = {"evicted": data}
    step_of = sm.workflows.step_of
    if step_of:
        named = {}
        for task in data:
            found = step_of.get(task.task_id)
            if found is not None:
                named[task.task_id] = {"workflow_id": found[0].workflow_id,
                                       "step": found[0].steps[found[1]].name}
        if named:
            value["steps"] = named
    return Result(OK, "", value, {})


def _gone_schedule(sm: StateMachine, data: Any) -> Result:
    return Result(OK, "", {"schedule": codec.schedule_from(data, {})}, {})


def _schedule(sm: StateMachine, data: Any) -> Result:
    sched = sm.schedules.get((data[0], data[1]))
    if sched is None:
        return Result(NOT_FOUND, f"schedule {data[1]} no longer exists", None,
                      {"schedule_id": data[1]})
    return Result(OK, "", {"schedule": sched}, {})


def _limit(sm: StateMachine, data: Any) -> Result:
    defn = sm.store.limiter.defs.get(data)
    if defn is None:
        return Result(NOT_FOUND, f"limit {data} no longer exists", None, {"name": data})
    return Result(OK, "", {"limit": defn}, {})


def _gone_limit(sm: StateMachine, data: Any) -> Result:
    return Result(OK, "", {"limit": LimitDef(*data)}, {})


def _fire(sm: StateMachine, data: Any) -> Result:
    result = _schedule(sm, data)
    if result.ok:
        result.value["task"] = sm.tasks.get(data[2]) if data[2] is not None else None
    return result


def _workflow(sm: StateMachine, data: Any) -> Result:
    """A workflow submitted or cancelled (workflows.py), as it is now."""
    wf = sm.workflows.by_id.get(data[0])
    if wf is None:
        return Result(NOT_FOUND, f"workflow {data[0]} is no longer retained", None,
                      {"workflow_id": data[0]})
    value: dict = {"workflow": wf}
    if data[1] is not None:
        value["duplicate"] = data[1]
    return Result(OK, "", value, {})


def _session(sm: StateMachine, data: Any) -> Result:
    """A worker session as it was answered (sessions.py; it may be gone since)."""
    worker_id, tenant, timeout_ms, opened_ms, created, given_back = data
    return Result(OK, "", {"session": {
        "worker_id": worker_id, "tenant": tenant, "timeout_ms": timeout_ms,
        "opened_ms": opened_ms, "created": created, "given_back": given_back}}, {})


_RENDER = {None: _done, "task": _task, "tasks": _tasks, "lease": _lease, "tenant": _tenant,
           "gone_task": _gone_task, "gone_schedule": _gone_schedule, "schedule": _schedule,
           "fire": _fire, "evicted": _evicted, "limit": _limit, "gone_limit": _gone_limit,
           "workflow": _workflow, "session": _session}


def pause_answer(pause: Pause, changed: bool, resumed_at_ms: int | None = None) -> Answer:
    """A pause or resume (pause_commands.py): the pause's record, whether this command
    changed anything, and when it was lifted (a resume)."""
    return (OK, "", None, "pause", [pause.record(), changed, resumed_at_ms])


def _pause(sm: StateMachine, data: Any) -> Result:
    record, changed, resumed_at_ms = data
    return Result(OK, "", {"pause": Pause(*record), "changed": changed,
                           "resumed_at_ms": resumed_at_ms}, {})


_RENDER["pause"] = _pause
