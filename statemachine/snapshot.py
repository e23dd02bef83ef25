"""Snapshots: the replicated state to bytes (format 3, codec.py) and back.

Written: the counters, tenants and schedules in canonical order, the tasks in seq order,
the request table in its order, and the digest's sums and request hashes (so that a
restore need not re-hash a million records: digest.py says why that is safe). Read back:
the records are decoded, every task goes through the store's `index` (in bulk mode: each
heap ordered once), and every derived index is rebuilt. Formats 1 and 2 are still read.

The garbage collector is the node's business (node/raft.py restores with collections
paused and the result frozen, node/gcpolicy.py): nothing here touches it.
"""
from __future__ import annotations

import sys
from itertools import repeat

from . import codec
from .digest import UNHASHED, item_hash
from .model import STATES
from .reads import list_tenants


def head(sm) -> dict:
    return {
        "v": codec.SNAPSHOT_VERSION, "seq": sm.seq, "now_ms": sm.now_ms,
        "cluster_token": sm.cluster_token, "task_seq": sm.task_seq,
        "tenants": [codec.tenant_record(v) for v in list_tenants(sm)],
        "schedules": [codec.schedule_record(sm.schedules[k]) for k in sorted(sm.schedules)],
        "tasks_sum": sm._digest.tasks.acc.to_bytes(16, "big"),
    }


def snapshot(sm) -> bytes:
    sm._digest.fold()   # the sums and hashes written must be those of the records
    tasks = _Sized(sm.store.all.oldest_first(), len(sm.tasks))
    return codec.encode_snapshot(head(sm), tasks, sm.requests, sm._digest.requests.hashes)


def restore(sm, blob: bytes):
    """Fills `sm`, a new StateMachine, from `blob`; folds the digest in as it goes, so the
    first `digest()` afterwards is cheap."""
    top, tasks, requests = codec.decode_snapshot(blob, sys.intern)
    sm.seq, sm.now_ms = top["seq"], top["now_ms"]
    sm.cluster_token, sm.task_seq = top["cluster_token"], top["task_seq"]
    for r in top["tenants"]:
        view = codec.tenant_from(r)
        view.tenant = sys.intern(view.tenant)
        sm.tenants[view.tenant] = view
    summed = _index_tasks(sm, tasks)
    sm._digest.tasks.loaded(summed if summed is not None
                            else int.from_bytes(top["tasks_sum"], "big"))
    cache: dict = {}
    for r in top["schedules"]:
        sched = codec.schedule_from(r, cache)
        sched.tenant = sys.intern(sched.tenant)
        sm.store.index_schedule(sched)
    for (rid, rec), h in requests:   # h: the item hash, or the bytes to hash (1, 2)
        sm.requests[rid] = tuple(rec)
        sm._digest.requests.add_folded(h if type(h) is int else item_hash(h))
    sm.store.tidy()
    sm._digest.mark_all()
    sm._digest.fold()
    return sm


def _index_tasks(sm, chunks) -> int | None:
    """Tasks in seq order from a snapshot, chunk by chunk, through the store's `index` in
    bulk mode. Returns the sum of the tasks' item hashes when the format has their
    encodings (1, 2), else None: format 3 carries the sum, and the tasks stay `UNHASHED`
    (digest.py)."""
    store, now_ms, index = sm.store, sm.now_ms, sm.store.index
    summed = None
    store.begin_bulk()
    for chunk, encodings in chunks:
        if encodings is None:
            hashes = repeat(UNHASHED, len(chunk))
        else:
            hashes = [item_hash(e) for e in encodings]
            summed = (summed or 0) + sum(hashes)
        for task, h in zip(chunk, hashes):
            if task.state not in STATES:
                raise codec.DecodeError(f"snapshot: task {task.task_id!r} is {task.state!r}")
            task.dh = h
            index(task, now_ms)
    store.end_bulk()
    if len(sm.tasks) != len(store.all):   # checked once here rather than per task
        raise codec.DecodeError("snapshot: a task id appears twice")
    return summed


class _Sized:
    """An iterator with a known length (the snapshot writes the task count first)."""

    __slots__ = ("it", "n")

    def __init__(self, it, n: int) -> None:
        self.it, self.n = it, n

    def __iter__(self):
        return self.it

    def __len__(self) -> int:
        return self.n
