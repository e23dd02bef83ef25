"""Records: the state's objects as flat lists, and back (no msgpack here: codec.py packs).

A record is what a snapshot stores and what the digest hashes (`codec.pack(record)` is its
canonical encoding, digest.py), so its layout is a stored format: fields are appended,
never reordered. Format 3 snapshots store tasks as *rows* (`task_chunk`): a task record with
its repeated values (tenant, type, state, worker, schedule, retry policy) as indexes into
per-chunk tables, so that a restore makes a fresh object only for what is unique to a task.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from . import commands as c
from .errors import DecodeError
from .model import STATES, Attempt, FireRecord, Schedule, Task, TenantView

def retry_record(p: c.RetryPolicy) -> list:
    return [p.backoff, p.base_ms, p.max_ms, p.multiplier_milli, p.jitter_permille]


def retry_from(r: Sequence[Any], cache: dict) -> c.RetryPolicy:
    key = r if type(r) is tuple else tuple(r)
    policy = cache.get(key)
    if policy is None:
        policy = cache[key] = c.RetryPolicy(backoff=r[0], base_ms=r[1], max_ms=r[2],
                                            multiplier_milli=r[3], jitter_permille=r[4])
    return policy


def task_record(t: Task) -> list:
    """The task's fields in record order; the trace context is appended only when the task
    has one, so the record (and the digest) of a task without one is unchanged."""
    attempts = [[a.attempt, a.worker_id, a.fencing_token, a.started_at_ms, a.ended_at_ms,
                 a.outcome, a.error] for a in t._attempts] if t._attempts else ()
    record = [t.seq, t.task_id, t.tenant, t.task_type, t.payload_json, t.priority, t.run_at_ms,
              t.state, t.attempt, t.max_retries, retry_record(t.retry), t.timeout_ms,
              t.idempotency_key, t.schedule_id, t.lease_expires_at_ms, t.fencing_token,
              t.worker_id, t.cancel_requested, t.last_error, t.result_json, t.created_at_ms,
              t.started_at_ms, t.completed_at_ms, t.failures, attempts]
    if t.traceparent is not None:
        record.append(t.traceparent)
    return record


_TASK_FIELDS = 25   # of a record without the optional trace context


def _blank_task(cls: type[Task]) -> Task:
    """A Task whose every slot the caller sets next. A compiled Task (the optional mypyc
    build, setup.py) can only be made by its __init__."""
    return cls("", "", "", "", 0, 0, 0, _DEFAULT_RETRY, 0, None, None, 0, 0)


_DEFAULT_RETRY = c.RetryPolicy()
# A Python Task is made without its __init__: that saves a million calls restoring a
# million tasks.
_new_task = _blank_task if hasattr(Task, "__mypyc_attrs__") else Task.__new__
_STATES = {state: state for state in STATES}   # one string object per state, not per task


def task_from(r: Sequence[Any], cache: dict,
              intern: Callable[[str], str] = lambda s: s) -> Task:
    """A Task from its record (a list or tuple), slot by slot: restore builds a million.
    Equal times and timeouts share one int object (a decoded int is a fresh 32-byte object
    per field, and created_at/run_at are mostly equal), as they do in a node that applied
    the submits."""
    traceparent = r[_TASK_FIELDS] if len(r) > _TASK_FIELDS else None
    if traceparent is not None:
        r = r[:_TASK_FIELDS]
    (seq, task_id, tenant, task_type, payload_json, priority, run_at_ms, state, attempt,
     max_retries, retry, timeout_ms, idempotency_key, schedule_id, lease_expires_at_ms,
     fencing_token, worker_id, cancel_requested, last_error, result_json, created_at_ms,
     started_at_ms, completed_at_ms, failures, attempts) = r
    t = _new_task(Task)
    t.task_id = task_id
    t.tenant = intern(tenant)
    t.task_type = intern(task_type)
    t.payload_json = payload_json
    t.priority = priority
    shared = cache.get(created_at_ms)
    if shared is None:
        shared = _share(cache, created_at_ms)
    t.created_at_ms = shared
    t.run_at_ms = shared if run_at_ms == shared else run_at_ms
    t.state = _STATES.get(state, state)
    t.attempt = attempt
    t.max_retries = max_retries
    t.retry = retry_from(retry, cache)
    t.timeout_ms = cache.get(timeout_ms) or _share(cache, timeout_ms)
    t.idempotency_key = idempotency_key
    t.schedule_id = schedule_id
    t.lease_expires_at_ms = lease_expires_at_ms
    t.fencing_token = fencing_token
    t.worker_id = worker_id
    t.cancel_requested = cancel_requested
    t.last_error = last_error
    t.result_json = result_json
    t.started_at_ms = started_at_ms
    t.completed_at_ms = completed_at_ms
    t._attempts = [Attempt(*a) for a in attempts] if attempts else None
    t.seq = seq
    t.failures = failures
    t.qver = 0
    t.limits = ()
    t.traceparent = traceparent
    return t


_SHARED_INTS_MAX = 4096
_V = TypeVar("_V")


def _share(cache: dict, value: _V) -> _V:
    """`value` as the object kept for it in `cache` (bounded: cleared when full). Only
    exact ints are shared: True == 1 but must stay a bool."""
    if type(value) is not int:
        return value
    if len(cache) >= _SHARED_INTS_MAX:
        cache.clear()
    cache[value] = value
    return value


# --- format 3 task rows: records with the repeated values as indexes -------------------------
#
# A chunk is [strings, retry records, rows]: tenant, task type, state, worker id and
# schedule id are indexes into the chunk's strings (or nil), the retry policy an index into
# its retry records, and run_at_ms is nil when it equals created_at_ms. Decoding then makes
# a fresh object only for what is unique to a task (id, payload, seq, times).

def task_chunk(tasks: list[Task]) -> list:
    """One chunk of rows. The lookups are inlined (a snapshot child runs this per task):
    `sd(value, len(strs))` is the value's index, a new one for a value not seen yet."""
    strs: dict[str, int] = {}
    sd = strs.setdefault
    retries: dict[tuple, int] = {}   # by exact field types and values (1 and True differ)
    retry_of: dict[int, int] = {}    # id(policy) -> its index: tasks share a few policies
    rows: list[list] = []
    append = rows.append
    for t in tasks:
        retry = retry_of.get(id(t.retry))
        if retry is None:
            key = tuple((type(v), v) for v in retry_record(t.retry))
            retry = retry_of[id(t.retry)] = retries.setdefault(key, len(retries))
        run_at, created, schedule_id, worker_id = (t.run_at_ms, t.created_at_ms,
                                                   t.schedule_id, t.worker_id)
        append([t.seq, t.task_id, sd(t.tenant, len(strs)), sd(t.task_type, len(strs)),
                t.payload_json, t.priority, None if run_at == created else run_at,
                sd(t.state, len(strs)), t.attempt, t.max_retries, retry, t.timeout_ms,
                t.idempotency_key,
                None if schedule_id is None else sd(schedule_id, len(strs)),
                t.lease_expires_at_ms, t.fencing_token,
                None if worker_id is None else sd(worker_id, len(strs)),
                t.cancel_requested, t.last_error, t.result_json, created, t.started_at_ms,
                t.completed_at_ms, t.failures,
                [[a.attempt, a.worker_id, a.fencing_token, a.started_at_ms, a.ended_at_ms,
                  a.outcome, a.error] for a in t._attempts] if t._attempts else ()])
    return [list(strs), [[v for _, v in key] for key in retries], rows]


def tasks_of_chunk(chunk: Any, cache: dict, intern: Callable[[str], str]) -> list[Task]:
    """The Tasks of one format 3 chunk, slot by slot (a restore builds a million). It
    repeats `task_from`'s slot assignments on purpose, with the chunk's tables looked up in
    place: calling a helper per task would add a million calls to a 1M-task restore."""
    try:
        strs, retry_records, rows = chunk
        strs = [intern(_STATES.get(v, v)) if type(v) is str else _bad(v) for v in strs]
        retries = [retry_from(r, cache) for r in retry_records]
        out = []
        for (seq, task_id, tenant, task_type, payload_json, priority, run_at_ms, state,
             attempt, max_retries, retry, timeout_ms, idempotency_key, schedule_id,
             lease_expires_at_ms, fencing_token, worker_id, cancel_requested, last_error,
             result_json, created_at_ms, started_at_ms, completed_at_ms, failures,
             attempts) in rows:
            t = _new_task(Task)
            t.task_id = task_id
            t.tenant = strs[tenant]
            t.task_type = strs[task_type]
            t.payload_json = payload_json
            t.priority = priority
            shared = cache.get(created_at_ms)
            if shared is None:
                shared = _share(cache, created_at_ms)
            t.created_at_ms = shared
            t.run_at_ms = shared if run_at_ms is None else run_at_ms
            t.state = strs[state]
            t.attempt = attempt
            t.max_retries = max_retries
            t.retry = retries[retry]
            t.timeout_ms = cache.get(timeout_ms) or _share(cache, timeout_ms)
            t.idempotency_key = idempotency_key
            t.schedule_id = None if schedule_id is None else strs[schedule_id]
            t.lease_expires_at_ms = lease_expires_at_ms
            t.fencing_token = fencing_token
            t.worker_id = None if worker_id is None else strs[worker_id]
            t.cancel_requested = cancel_requested
            t.last_error = last_error
            t.result_json = result_json
            t.started_at_ms = started_at_ms
            t.completed_at_ms = completed_at_ms
            t._attempts = [Attempt(*a) for a in attempts] if attempts else None
            t.seq = seq
            t.failures = failures
            t.qver = 0
            t.limits = ()
            t.traceparent = None   # the snapshot's head holds them (`task_traces`)
            out.append(t)
        return out
    except DecodeError:
        raise
    except (TypeError, ValueError, IndexError) as exc:
        raise DecodeError(f"snapshot task rows: {exc.__class__.__name__}") from None


def _bad(value: object) -> NoReturn:
    raise DecodeError(f"snapshot strings: {type(value).__name__}")


def template_record(t: c.TaskTemplate) -> list:
    return [t.task_type, t.payload_json, t.priority, t.timeout_ms, t.max_retries,
            retry_record(t.retry)]


def template_from(r: Sequence, cache: dict) -> c.TaskTemplate:
    return c.TaskTemplate(task_type=r[0], payload_json=r[1], priority=r[2], timeout_ms=r[3],
                          max_retries=r[4], retry=retry_from(r[5], cache))


def schedule_record(s: Schedule) -> list:
    return [s.tenant, s.schedule_id, s.cron, s.timezone, template_record(s.template), s.overlap,
            s.misfire, s.catchup_window_ms, s.paused, s.start_at_ms, s.end_at_ms, s.jitter_ms,
            s.next_fire_ms, s.created_at_ms, s.updated_at_ms,
            [[f.fire_ms, f.outcome, f.task_id] for f in s.fires]]


def schedule_from(r: Sequence, cache: dict) -> Schedule:
    (tenant, schedule_id, cron, tz, template, overlap, misfire, catchup, paused, start_at,
     end_at, jitter, next_fire, created, updated, fires) = r
    return Schedule(tenant, schedule_id, cron, tz, template_from(template, cache), overlap,
                    misfire, catchup, paused, start_at, end_at, jitter, next_fire, created,
                    updated, [FireRecord(*f) for f in fires])


def tenant_record(v: TenantView) -> list:
    return [v.tenant, v.max_running, v.weight, v.service]


def tenant_from(r: Sequence) -> TenantView:
    view = TenantView(r[0], r[1], r[2])
    view.service = r[3]
    return view


def request_record(request_id: str, rec: tuple) -> list:
    return [request_id, list(rec)]
