"""Re-partitioning a backup's state over another shard count (DESIGN.md section 6.1).

`reshard(blobs, shards, shard_of)` takes the snapshots of every old shard, in shard order,
and returns one snapshot per new shard: every task (with its attempts and idempotency
key), schedule (with its fire history), tenant and audit entry goes to the shard
`shard_of(tenant)` names (an audit entry without a tenant to shard 0); every paused queue
goes to every shard. Each new state is
made by the snapshot's own encode and restore, so its derived indexes, counts and bytes
are those of any state holding the same records: equal inputs give equal bytes on every
node.

Counters: `seq`, `now_ms` and `cluster_token` are the highest of the old shards' (a
client's `min_seq` and every token handed out stay below them); tasks are renumbered in
(created_at_ms, old shard, old seq) order, so `task_seq` is the new shard's task count;
audit ids are renumbered in (at_ms, old shard, old id) order, the newest
`audit_entries_max` kept. The request table starts empty: a request id's answer may name
tasks of several tenants, and a restore rolls the cluster back anyway. Worker sessions
(sessions.py) are not carried either: a session belongs to one shard's leader, and a
worker opens its sessions again with its next keepalive (a task still leased in the
backup goes back when its lease runs out). The digest's roll is a hash of the old rolls
and the new shard's place.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from . import audit, codec, snapshot_format
from .errors import DecodeError
from .graphs import workflow_record
from .limits import Limits
from .machine import StateMachine
from .reads import list_tenants


def reshard(blobs: Sequence[bytes], shards: int, shard_of: Callable[[str], int],
            limits: Limits | None = None) -> list[bytes]:
    """One snapshot per new shard (0..shards-1) from the old shards' snapshots `blobs`.
    DecodeError on a snapshot that does not decode, or a task id or schedule in two."""
    if not blobs or not 1 <= shards:
        raise DecodeError("reshard needs at least one old shard and one new one")
    olds = [StateMachine.restore(b, limits=limits) for b in blobs]
    # every task's order key, read before any is renumbered
    rows = [(shard_of(t.tenant), (t.created_at_ms, i, t.seq), t) for i, old in enumerate(olds)
            for t in old.store.all.oldest_first()]
    return [_one(olds, [r for r in rows if r[0] == s], s, shards, shard_of, limits)
            for s in range(shards)]


def _one(olds: list[StateMachine], rows: list, s: int, shards: int,
         shard_of: Callable[[str], int], limits: Limits | None) -> bytes:
    tasks = sorted(rows, key=lambda row: row[1])
    renumbered = []
    for n, (_, _, t) in enumerate(tasks, 1):
        t.seq = n     # the old machines are thrown away: their tasks are reused
        renumbered.append(t)
    head = {
        "v": snapshot_format.SNAPSHOT_VERSION,
        "seq": max(o.seq for o in olds), "now_ms": max(o.now_ms for o in olds),
        "cluster_token": max(o.cluster_token for o in olds), "task_seq": len(renumbered),
        "tenants": _tenants(olds, s, shard_of), "schedules": _schedules(olds, s, shard_of),
        "roll": _roll(olds, s, shards), "state_digest": "",
    }
    head["audit_seq"], head["audit"] = _audit(olds, s, shard_of, limits or Limits())
    head["limits"] = _limits(olds, s, shards, shard_of)
    head["task_limits"] = sorted([t.task_id, list(t.limits)] for t in renumbered if t.limits)
    head.update(snapshot_format.trace_fields(renumbered))
    head.update(_workflows(olds, s, shard_of))
    pauses = _pauses(olds)
    if pauses:
        head["queue_pauses"] = pauses
    progress = sorted([tid, *o.store.progress[tid]] for o in olds for tid in o.store.progress
                      if shard_of(o.tasks[tid].tenant) == s)
    if progress:   # optional (DESIGN 9): absent is none
        head["task_progress"] = progress
    blob = snapshot_format.encode_snapshot(head, renumbered, {}, [])
    return StateMachine.restore(blob, limits=limits).snapshot()


def _tenants(olds: list[StateMachine], s: int, shard_of: Callable[[str], int]) -> list:
    """Tenant records of shard `s`, by name; a tenant in several old shards keeps the
    settings of the first that has it and the sum of their `service`."""
    out: dict[str, list] = {}
    for old in olds:
        for view in list_tenants(old):
            if shard_of(view.tenant) != s:
                continue
            rec = codec.tenant_record(view)
            if view.tenant in out:
                out[view.tenant][3] += rec[3]
            else:
                out[view.tenant] = rec
    return [out[k] for k in sorted(out)]


def _schedules(olds: list[StateMachine], s: int, shard_of: Callable[[str], int]) -> list:
    out: dict[tuple[str, str], list] = {}
    for old in olds:
        for key in sorted(old.schedules):
            if shard_of(key[0]) == s:
                if key in out:
                    raise DecodeError(f"schedule {key[1]!r} of tenant {key[0]!r} is in two "
                                      "old shards")
                out[key] = codec.schedule_record(old.schedules[key])
    return [out[k] for k in sorted(out)]


def _limits(olds: list[StateMachine], s: int, shards: int,
            shard_of: Callable[[str], int]) -> list:
    """Every shard gets every limit; a partition by tenant goes with its tenant. Only
    limits partitioned by tenant are exact across shards (docs/DESIGN.md, keyed limits):
    any other is refused for a cluster of several shards."""
    defs: dict[str, list] = {}
    parts: dict[str, dict[str, list]] = {}
    for old in olds:
        for rec, rows in old.store.limiter.records(old.now_ms):
            if shards > 1 and rec[4] != "tenant":
                raise DecodeError(f"limit {rec[0]!r} is not partitioned by tenant, so it "
                                  "cannot be exact over several shards: delete it first")
            defs.setdefault(rec[0], list(rec))
            mine = parts.setdefault(rec[0], {})
            for key, running, window, paused in rows:
                if shards == 1 or shard_of(key) == s:
                    _merge(mine, key, running, window, paused)
    return [[defs[n], [mine[k] for k in sorted(mine)]]
            for n, mine in sorted((n, parts[n]) for n in defs)]


def _pauses(olds: list[StateMachine]) -> list:
    """Every shard holds every pause (a pause must hold on every shard, DESIGN 15.1); a
    selector paused on several old shards keeps its earliest record."""
    by_key: dict[tuple[str, str], list] = {}
    for old in olds:
        for rec in old.store.pauses.records():
            key = (rec[0] or "", rec[1] or "")
            have = by_key.get(key)
            if have is None or rec[2] < have[2]:
                by_key[key] = rec
    return [by_key[k] for k in sorted(by_key)]


def _merge(mine: dict[str, list], key: str, running: list, window: list, paused: int) -> None:
    have = mine.get(key)
    if have is None:
        mine[key] = [key, list(running), list(window), paused]
        return
    have[1] += [r for r in running if r not in have[1]]
    have[2] = sorted(have[2] + list(window))
    have[3] = max(have[3], paused)


def _audit(olds: list[StateMachine], s: int, shard_of: Callable[[str], int],
           limits: Limits) -> tuple[int, list]:
    rows = sorted(((e.at_ms, i, e.id, e) for i, old in enumerate(olds)
                   for e in old.audit.entries
                   if (0 if e.tenant is None else shard_of(e.tenant)) == s),
                  key=lambda row: row[:3])
    kept = rows[max(0, len(rows) - limits.audit_entries_max):]
    out = []
    for n, (_, _, _, e) in enumerate(kept, 1):
        rec = audit.entry_record(e)
        rec[0] = n
        out.append(rec)
    return len(out), out


def _workflows(olds: list[StateMachine], s: int, shard_of: Callable[[str], int]) -> dict:
    """Shard `s`'s workflows (with their tenants), renumbered in (created_at_ms, old shard,
    old seq) order; finished ones keep their order of finishing the same way."""
    rows = sorted(((w.created_at_ms, i, w.seq, w) for i, old in enumerate(olds)
                   for w in old.workflows.by_id.values() if shard_of(w.tenant) == s),
                  key=lambda row: row[:3])
    done = sorted((row for row in rows if row[3].state != "running"),
                  key=lambda row: (row[3].finished_at_ms, row[1], row[3].finish_seq))
    finish = {id(row[3]): n for n, row in enumerate(done, 1)}
    out = []
    for n, (_, _, _, w) in enumerate(rows, 1):
        rec = workflow_record(w)
        rec[2], rec[8] = n, finish.get(id(w), 0)
        out.append(rec)
    return {"wf_seq": len(out), "wf_finish_seq": len(done), "workflows": out} if out else {}


def _roll(olds: list[StateMachine], s: int, shards: int) -> bytes:
    h = hashlib.blake2b(b"tsched reshard %d of %d" % (s, shards), digest_size=16)
    for old in olds:
        h.update(old.roll)
    return h.digest()
