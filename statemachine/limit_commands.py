"""Handlers of keyed limits (ratelimits.py): put, delete, and a worker's RateLimited report
(PauseLimit). (A submit's check of the limits its task names: tasks.py.)"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from . import audit
from . import commands as c
from . import validate as V
from .errors import CONFLICT, INVALID_ARGUMENT, NOT_FOUND, TENANT_LIMIT
from .lifecycle import RELEASE, decide
from .ratelimits import LimitDef, partition_key
from .results import Answer, gone_limit_answer, limit_answer, task_answer
from .tasks import find
from .validate import Rejected

if TYPE_CHECKING:
    from .machine import StateMachine


def _fields(d: LimitDef) -> dict:
    return {"rate": d.rate, "per_ms": d.per_ms, "concurrency": d.concurrency,
            "partition_by": d.partition_by}


def put_limit(sm: StateMachine, cmd: c.PutLimit) -> Answer:
    """Create or change. Its partitioning is fixed for life (the running slots and windows
    are counted per partition): a change of `partition_by` is a conflict."""
    V.put_limit(cmd, sm.limits)
    limiter = sm.store.limiter
    old = limiter.defs.get(cmd.name)
    if old is None and len(limiter.defs) >= sm.limits.limits_max:
        raise Rejected(TENANT_LIMIT, f"at most {sm.limits.limits_max} limits",
                       limit=sm.limits.limits_max)
    if old is not None and old.partition_by != cmd.partition_by:
        raise Rejected(CONFLICT, f"limit {cmd.name} is partitioned by "
                       f"{old.partition_by!r}; delete it to partition it otherwise",
                       field="partition_by")
    created = old.created_at_ms if old is not None else sm.now_ms
    defn = LimitDef(sys.intern(cmd.name), cmd.rate, cmd.per_ms, cmd.concurrency,
                    cmd.partition_by, created, sm.now_ms)
    limiter.put(defn)
    audit.record(sm, cmd, "limit.put", None, defn.name,
                 audit.diff(_fields(old) if old else None, _fields(defn)))
    return limit_answer(defn.name)


def delete_limit(sm: StateMachine, cmd: c.DeleteLimit) -> Answer:
    """Its held tasks go back to the queue; tasks that name it run unbound by it."""
    V.limit_ref(cmd, sm.limits)
    limiter = sm.store.limiter
    old = limiter.defs.get(cmd.name)
    if old is None:
        raise Rejected(NOT_FOUND, f"limit {cmd.name} not found", name=cmd.name)
    limiter.delete(cmd.name, sm.now_ms)
    audit.record(sm, cmd, "limit.delete", None, old.name, audit.diff(_fields(old), None))
    return gone_limit_answer(old.record())


def pause_limit(sm: StateMachine, cmd: c.PauseLimit) -> Answer:
    """RateLimited: the task's partition of the limit is paused for `after_ms` for every
    worker, and the task goes back to pending with its attempt not counted (the attempt
    stays in its history, outcome `rate_limited`)."""
    V.pause_limit(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    row = decide(task, RELEASE, cmd.fencing_token)
    limiter = sm.store.limiter
    defn = limiter.defs.get(cmd.limit)
    if cmd.limit not in task.limits or defn is None:
        raise Rejected(INVALID_ARGUMENT, f"task {task.task_id} is not bound by a limit "
                       f"{cmd.limit!r}", field="limit", limit=cmd.limit)
    if row.repeat:
        return task_answer(task.task_id)
    limiter.pause(defn, partition_key(defn, task), sm.now_ms + cmd.after_ms)
    attempt = task.current_attempt()
    assert attempt is not None and attempt.outcome is None, task
    attempt.ended_at_ms = sm.now_ms
    attempt.outcome = "rate_limited"
    task.attempt -= 1   # not counted: the partner refused it, the task did not fail
    sm.store.move(task, row.new, sm.now_ms)
    return task_answer(task.task_id)
