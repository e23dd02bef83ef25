"""Answers: what a handler returns, typed, and how it becomes a `Result`.

The request table keeps each command's answer so that a repeated `request_id` gets the
first answer again (DESIGN section 5). An answer is kept as a *row*, a 5-tuple
`(code, message, details, kind, data)`: snapshots store rows (`codec.request_record`) and
the digest hashes them, so their shape is a stored format. The classes below are those
rows, built from named fields (a `TaskAnswer(task_id, duplicate)` is the row
`("ok", "", None, "task", [task_id, duplicate])`); a row read back from a snapshot is a
plain tuple, so `render` dispatches on the row's `kind`, never on its class.

An answer names records by key, not by reference: rendered after the fact (a repeat), it
shows the record as it is now (or `not_found` once it is gone); answers about a removed
record (discard, delete) carry the record itself.
"""
from __future__ import annotations

from . import codec
from .errors import NOT_FOUND, OK, Result


class Answer(tuple):
    """A request-table row. Subclasses build one from named fields."""

    __slots__ = ()
    KIND: str | None = None

    @property
    def code(self) -> str:
        return self[0]

    @property
    def data(self):
        return self[4]


class Done(Answer):
    """Success with no value (Tick, Barrier)."""

    __slots__ = ()

    def __new__(cls):
        return tuple.__new__(cls, (OK, "", None, None, None))


class Refused(Answer):
    """A rejection: its code, message and details (nothing changed)."""

    __slots__ = ()

    def __new__(cls, code: str, message: str, details: dict | None):
        return tuple.__new__(cls, (code, message, details or None, None, None))


class TaskAnswer(Answer):
    __slots__ = ()
    KIND = "task"

    def __new__(cls, task_id: str, duplicate: bool | None = None):
        return tuple.__new__(cls, (OK, "", None, "task", [task_id, duplicate]))


class TasksAnswer(Answer):
    """The tasks a Claim granted, by id."""

    __slots__ = ()
    KIND = "tasks"

    def __new__(cls, task_ids: list[str]):
        return tuple.__new__(cls, (OK, "", None, "tasks", task_ids))


class LeaseAnswer(Answer):
    __slots__ = ()
    KIND = "lease"

    def __new__(cls, lease_expires_at_ms: int, cancel_requested: bool):
        return tuple.__new__(cls, (OK, "", None, "lease",
                                   [lease_expires_at_ms, cancel_requested]))


class TenantAnswer(Answer):
    __slots__ = ()
    KIND = "tenant"

    def __new__(cls, tenant: str):
        return tuple.__new__(cls, (OK, "", None, "tenant", tenant))


class GoneTaskAnswer(Answer):
    """A discarded task, as its record."""

    __slots__ = ()
    KIND = "gone_task"

    def __new__(cls, record: list):
        return tuple.__new__(cls, (OK, "", None, "gone_task", record))


class ScheduleAnswer(Answer):
    __slots__ = ()
    KIND = "schedule"

    def __new__(cls, tenant: str, schedule_id: str):
        return tuple.__new__(cls, (OK, "", None, "schedule", [tenant, schedule_id]))


class FireAnswer(Answer):
    """A Fire: the schedule, and the task it made (or None)."""

    __slots__ = ()
    KIND = "fire"

    def __new__(cls, tenant: str, schedule_id: str, task_id: str | None):
        return tuple.__new__(cls, (OK, "", None, "fire", [tenant, schedule_id, task_id]))


class GoneScheduleAnswer(Answer):
    """A deleted schedule, as its record."""

    __slots__ = ()
    KIND = "gone_schedule"

    def __new__(cls, record: list):
        return tuple.__new__(cls, (OK, "", None, "gone_schedule", record))


class EvictedAnswer(Answer):
    """A Tick that evicted finished tasks: the records that left the state, so that a node
    can archive them (DESIGN 14.3) without the state machine doing I/O. Only Ticks answer
    so, and Ticks are never recorded in the request table: these rows are never stored."""

    __slots__ = ()
    KIND = "evicted"

    def __new__(cls, tasks: list):
        return tuple.__new__(cls, (OK, "", None, "evicted", tasks))


DONE = Done()


# --- rendering: a row (fresh or restored) -> Result ------------------------------------------

def render(sm, row) -> Result:
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


def _done(sm, data) -> Result:
    return Result(OK, "", None, {})


def _task(sm, data) -> Result:
    task = sm.tasks.get(data[0])
    if task is None:
        return Result(NOT_FOUND, f"task {data[0]} is no longer retained", None,
                      {"task_id": data[0]})
    value = {"task": task}
    if data[1] is not None:
        value["duplicate"] = data[1]
    return Result(OK, "", value, {})


def _tasks(sm, data) -> Result:
    tasks = sm.tasks
    return Result(OK, "", {"tasks": [tasks[t] for t in data if t in tasks]}, {})


def _lease(sm, data) -> Result:
    return Result(OK, "", {"lease_expires_at_ms": data[0], "cancel_requested": data[1]}, {})


def _tenant(sm, data) -> Result:
    return Result(OK, "", {"tenant": sm.tenants[data]}, {})


def _gone_task(sm, data) -> Result:
    return Result(OK, "", {"task": codec.task_from(data, {})}, {})


def _evicted(sm, data) -> Result:
    return Result(OK, "", {"evicted": data}, {})


def _gone_schedule(sm, data) -> Result:
    return Result(OK, "", {"schedule": codec.schedule_from(data, {})}, {})


def _schedule(sm, data) -> Result:
    sched = sm.schedules.get((data[0], data[1]))
    if sched is None:
        return Result(NOT_FOUND, f"schedule {data[1]} no longer exists", None,
                      {"schedule_id": data[1]})
    return Result(OK, "", {"schedule": sched}, {})


def _fire(sm, data) -> Result:
    result = _schedule(sm, data)
    if result.ok:
        result.value["task"] = sm.tasks.get(data[2]) if data[2] is not None else None
    return result


_RENDER = {None: _done, "task": _task, "tasks": _tasks, "lease": _lease, "tenant": _tenant,
           "gone_task": _gone_task, "gone_schedule": _gone_schedule, "schedule": _schedule,
           "fire": _fire, "evicted": _evicted}
