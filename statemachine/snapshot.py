"""Snapshots: the replicated state to bytes (format 8, snapshot_format.py) and back.

Written: the counters, tenants and schedules in canonical order, the tasks in seq order,
the request table in its order and when its entries were recorded, the audit trail
(format 6) and the digest's roll (so that a restored replica continues the value its peers
have). The head's `state_digest` is left empty, as a re-shard's is: the state digest is a
pass over every record (40-60 % of a snapshot's CPU), snapshots are written again and again
under a steady load, and nothing reads it back (digest.py). Read back: the records are
decoded, every task goes through the store's `index` (in bulk mode: each heap ordered
once), and every derived index is rebuilt. Formats 1-3 are still read; they carry no roll,
so the restored roll is the hash of the snapshot's bytes (`digest.roll_from_blob`):
replicas that restore the same snapshot agree.

The garbage collector is the node's business (node/raft/replica.py restores with collections
paused and the result frozen, node/gcpolicy.py): nothing here touches it.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from . import audit, codec, request_table, sessions, snapshot_format, workflows
from .digest import roll_from_blob
from .model import STATES, Task
from .reads import list_tenants

if TYPE_CHECKING:
    from .machine import StateMachine


def head(sm: StateMachine) -> dict:
    """Format 7: the keyed limits always, the workflows' fields for a state that has had
    workflows (workflows.head_fields), the paused queues while any pause stands."""
    wf = workflows.head_fields(sm)
    # Worker sessions: an optional key, absent when there are none (sessions.py).
    opened = {"sessions": sessions.records(sm)} if sm.sessions else {}
    return {
        "v": snapshot_format.SNAPSHOT_VERSION, "seq": sm.seq, "now_ms": sm.now_ms,
        "cluster_token": sm.cluster_token, "task_seq": sm.task_seq,
        "tenants": [codec.tenant_record(v) for v in list_tenants(sm)],
        "schedules": [codec.schedule_record(sm.schedules[k]) for k in sorted(sm.schedules)],
        "roll": sm.roll,
        "audit_seq": sm.audit.seq,
        "audit": [audit.entry_record(e) for e in sm.audit.entries],
        "limits": sm.store.limiter.records(sm.now_ms),
        "task_limits": sm.store.limiter.task_limits(),
        **snapshot_format.trace_fields(sm.tasks.values()),
        **wf, **opened,
        **pause_fields(sm),
        **_progress_field(sm),
    }


def pause_fields(sm: StateMachine) -> dict:
    """Paused queues (pauses.py): `queue_pauses`, the records by key, present while any
    pause stands (an optional key of format 8: absent reads as none)."""
    records = sm.store.pauses.records()
    return {"queue_pauses": records} if records else {}


def _progress_field(sm: StateMachine) -> dict:
    """`task_progress` (DESIGN 9), only once a running task has some: optional, absent is
    none, so a state without progress encodes as it did before it existed."""
    records = sm.store.progress_records()
    return {"task_progress": records} if records else {}


def snapshot(sm: StateMachine) -> bytes:
    tasks = _Sized(sm.store.all.oldest_first(), len(sm.tasks))
    top = dict(head(sm), state_digest="")   # not computed: see the module's docstring
    return snapshot_format.encode_snapshot(top, tasks, sm.requests,
                                           sm.request_times.as_runs())


def restore(sm: StateMachine, blob: bytes) -> StateMachine:
    """Fills `sm`, a new StateMachine, from `blob`."""
    top, tasks, requests, times = snapshot_format.decode_snapshot(blob, sys.intern)
    sm.seq, sm.now_ms = top["seq"], top["now_ms"]
    sm.cluster_token, sm.task_seq = top["cluster_token"], top["task_seq"]
    for r in top["tenants"]:
        view = codec.tenant_from(r)
        view.tenant = sys.intern(view.tenant)
        sm.tenants[view.tenant] = view
    _index_tasks(sm, tasks, dict(top.get("task_limits", ())) if top["v"] >= 7 else {},
                 snapshot_format.traces_of(top))
    sm.roll = top["roll"] if top["v"] >= 4 else roll_from_blob(top["v"], blob)
    cache: dict = {}
    for r in top["schedules"]:
        sched = codec.schedule_from(r, cache)
        sched.tenant = sys.intern(sched.tenant)
        sm.store.index_schedule(sched)
    if top["v"] >= 6:
        audit.restore(sm.audit, top.get("audit_seq"), top.get("audit"))
    if top["v"] >= 7:
        _restore_limits(sm, top.get("limits"))
        workflows.restore(sm, top)
        _restore_pauses(sm, top.get("queue_pauses"))
        _restore_sessions(sm, top.get("sessions"))
    _restore_progress(sm, top.get("task_progress"))
    for rid, rec in requests:
        sm.requests[rid] = tuple(rec)
    _restore_times(sm, times)
    sm.store.tidy()
    return sm


def _restore_times(sm: StateMachine, runs: list) -> None:
    """The request table's times (format 5); the entries of an older format, which has
    none, are untimed (request_table.py: evicted as before, by the count bound only)."""
    if not runs and sm.requests:
        runs = [[request_table.UNTIMED_MS, len(sm.requests)]]
    for ms, n in runs:
        sm.request_times.add(ms, n)
    if sm.request_times.count != len(sm.requests):   # an id twice in the records
        raise codec.DecodeError("snapshot: the request times do not match the table")


def _restore_sessions(sm: StateMachine, rows: object) -> None:
    try:
        sessions.restore(sm, rows)
    except (TypeError, ValueError) as exc:
        raise codec.DecodeError(f"snapshot sessions: {exc}") from None


def _restore_limits(sm: StateMachine, records: object) -> None:
    try:
        sm.store.limiter.restore(records, sm.now_ms)
    except (TypeError, ValueError, KeyError) as exc:
        raise codec.DecodeError(f"snapshot limits: {exc.__class__.__name__}") from None


def _restore_pauses(sm: StateMachine, records: object) -> None:
    try:
        sm.store.pauses.restore(records)
    except (TypeError, ValueError) as exc:
        raise codec.DecodeError(f"snapshot queue pauses: {exc.__class__.__name__}") from None
def _restore_progress(sm: StateMachine, records: object) -> None:
    try:
        sm.store.restore_progress(records)
    except (TypeError, ValueError) as exc:
        raise codec.DecodeError(f"snapshot task_progress: {exc}") from None


def _index_tasks(sm: StateMachine, chunks: Iterable[snapshot_format.TaskChunk],
                 limited: dict, traced: dict[str, str]) -> None:
    """Tasks in seq order from a snapshot, chunk by chunk, through the store's `index` in
    bulk mode; `limited`: the limit names of the tasks that have some; `traced`: the trace
    contexts of the tasks that have one."""
    store, now_ms, index = sm.store, sm.now_ms, sm.store.index
    store.begin_bulk()
    for chunk, _encodings in chunks:
        for task in chunk:
            if task.state not in STATES:
                raise codec.DecodeError(f"snapshot: task {task.task_id!r} is {task.state!r}")
            if limited and task.task_id in limited:
                task.limits = tuple(sys.intern(n) for n in limited[task.task_id])
            if traced and task.task_id in traced:
                task.traceparent = traced[task.task_id]
            index(task, now_ms)
    store.end_bulk()
    if len(sm.tasks) != len(store.all):   # checked once here rather than per task
        raise codec.DecodeError("snapshot: a task id appears twice")


class _Sized:
    """An iterator with a known length (the snapshot writes the task count first)."""

    __slots__ = ("it", "n")

    def __init__(self, it: Iterator[Task], n: int) -> None:
        self.it, self.n = it, n

    def __iter__(self) -> Iterator[Task]:
        return self.it

    def __len__(self) -> int:
        return self.n
