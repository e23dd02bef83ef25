"""The audit trail (DESIGN 14.6): who did which operator action to what, and the change.

The actor travels inside the command (`actor`, set by the node from the request's token);
a handler that applied its action successfully calls `record` last, so a refused action
(a `Rejected` raised before any change) records nothing, and a command without an actor
(the timer's fires, an older node's entries) neither. Entries get strictly increasing ids,
live in a deque oldest first, and the oldest is evicted past `audit_entries_max`; the
evicted entries of the command being applied wait in `Trail.evicted` (not replicated)
until `machine.py` hands them out in that command's result, for the node's archive.

`change` is canonical JSON text (sorted keys, compact), bounded by
`audit_change_bytes_max`: a bigger one is replaced by a summary naming its fields.
"""
from __future__ import annotations

import json
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Any

from . import validate as V
from .errors import DecodeError, INVALID_ARGUMENT
from .results import DONE, Answer
from .validate import Rejected

if TYPE_CHECKING:
    from .limits import Limits
    from .machine import StateMachine
    from .model import Schedule, Task

ACTIONS = ("task.cancel", "task.replay", "task.discard", "schedule.put", "schedule.pause",
           "schedule.resume", "schedule.trigger", "schedule.delete", "tenant.set",
           "cluster.transfer_leadership", "cluster.add_member", "cluster.remove_member")
# What an AuditNote may record (DESIGN 14.6; membership changes: 6.2).
NOTE_ACTIONS = ("cluster.transfer_leadership", "cluster.add_member", "cluster.remove_member")
SCHEDULE_FIELDS = ("cron", "timezone", "task", "overlap", "misfire", "catchup_window_ms",
                   "paused", "start_at_ms", "end_at_ms", "jitter_ms")


class AuditEntry:
    __slots__ = ("id", "at_ms", "actor", "action", "tenant", "target", "request_id",
                 "change_json")

    def __init__(self, id: int, at_ms: int, actor: str, action: str, tenant: str | None,
                 target: str, request_id: str, change_json: str) -> None:
        self.id = id
        self.at_ms = at_ms
        self.actor = actor
        self.action = action
        self.tenant = tenant
        self.target = target
        self.request_id = request_id
        self.change_json = change_json

    def __repr__(self) -> str:
        return f"AuditEntry({self.id}, {self.actor!r}, {self.action!r}, {self.target!r})"


class Trail:
    """The replicated trail (`entries`, `seq`: the last id given) and, not replicated, the
    entries the command being applied evicted."""

    __slots__ = ("entries", "seq", "evicted")

    def __init__(self) -> None:
        self.entries: deque[AuditEntry] = deque()
        self.seq = 0
        self.evicted: list[AuditEntry] = []


# --- records (snapshots, digest) ------------------------------------------------------------

def entry_record(e: AuditEntry) -> list:
    return [e.id, e.at_ms, e.actor, e.action, e.tenant, e.target, e.request_id, e.change_json]


def entry_from(r: Any) -> AuditEntry:
    if not isinstance(r, (list, tuple)) or len(r) != 8 or type(r[0]) is not int \
            or type(r[1]) is not int or not all(isinstance(v, str) for v in (r[2], r[3], r[5],
                                                                            r[6], r[7])) \
            or not (r[4] is None or isinstance(r[4], str)):
        raise DecodeError("snapshot: a malformed audit entry")
    return AuditEntry(*r)


def restore(trail: Trail, seq: Any, records: Any) -> None:
    """From a snapshot's head (format 6): ids strictly increasing, none past `seq`."""
    if type(seq) is not int or not isinstance(records, (list, tuple)):
        raise DecodeError("snapshot: a malformed audit trail")
    last = 0
    for r in records:
        e = entry_from(r)
        if e.id <= last or e.id > seq:
            raise DecodeError("snapshot: audit ids are not increasing")
        last = e.id
        trail.entries.append(e)
    trail.seq = seq


# --- recording ------------------------------------------------------------------------------

def check_actor(cmd: Any, lim: Limits) -> None:
    V.string("actor", cmd.actor, lim.audit_actor_chars_max, optional=True)


def record(sm: StateMachine, cmd: Any, action: str, tenant: str | None, target: str,
           change: dict | None) -> None:
    """One entry for `cmd`'s applied action, when it names an actor."""
    actor = cmd.actor
    if actor is None:
        return
    text = change_json(change, sm.limits.audit_change_bytes_max)
    trail = sm.audit
    trail.seq += 1
    trail.entries.append(AuditEntry(trail.seq, sm.now_ms, actor, action, tenant, target,
                                    cmd.request_id, text))
    while len(trail.entries) > sm.limits.audit_entries_max:
        trail.evicted.append(trail.entries.popleft())


def change_json(change: dict | None, bytes_max: int) -> str:
    text = json.dumps(change, sort_keys=True, separators=(",", ":"))
    if len(text) <= bytes_max:
        return text
    fields: list[str] = []
    if isinstance(change, dict):
        for side in ("before", "after"):
            part = change.get(side)
            if isinstance(part, dict):
                fields.extend(k for k in part if k not in fields)
    summary = {"truncated": True, "bytes": len(text), "fields": sorted(fields)[:32]}
    return json.dumps(summary, sort_keys=True, separators=(",", ":"))


def note(sm: StateMachine, cmd: Any) -> Answer:
    """An AuditNote (`cmd`: any field may hold anything until checked): an entry, nothing
    else."""
    lim = sm.limits
    V.string("actor", cmd.actor, lim.audit_actor_chars_max)
    V.choice("action", cmd.action, NOTE_ACTIONS)
    V.string("target", cmd.target, lim.id_chars_max)
    V.sized("change_json", cmd.change_json, lim.audit_change_bytes_max)
    try:
        change = json.loads(cmd.change_json)
    except ValueError:
        raise Rejected(INVALID_ARGUMENT, "change_json is not JSON", field="change_json") from None
    record(sm, cmd, cmd.action, None, cmd.target, change if isinstance(change, dict) else None)
    return DONE


# --- changes --------------------------------------------------------------------------------

def task_change(before_state: str, task: Task) -> dict:
    return {"before": {"state": before_state},
            "after": {"state": task.state, "cancel_requested": task.cancel_requested}}


def schedule_fields(s: Schedule) -> dict:
    t = s.template
    task = {"task_type": t.task_type, "payload_json": t.payload_json, "priority": t.priority,
            "timeout_ms": t.timeout_ms, "max_retries": t.max_retries,
            "retry": {"backoff": t.retry.backoff, "base_ms": t.retry.base_ms,
                      "max_ms": t.retry.max_ms, "multiplier_milli": t.retry.multiplier_milli,
                      "jitter_permille": t.retry.jitter_permille}}
    values = {"cron": s.cron, "timezone": s.timezone, "task": task, "overlap": s.overlap,
              "misfire": s.misfire, "catchup_window_ms": s.catchup_window_ms,
              "paused": s.paused, "start_at_ms": s.start_at_ms, "end_at_ms": s.end_at_ms,
              "jitter_ms": s.jitter_ms}
    return {k: values[k] for k in SCHEDULE_FIELDS}


def diff(before: dict | None, after: dict | None) -> dict:
    """Before and after, only the fields that changed (a side that is None stays None)."""
    if before is None or after is None:
        return {"before": before, "after": after}
    changed = [k for k in after if before.get(k) != after[k]]
    return {"before": {k: before.get(k) for k in changed}, "after": {k: after[k] for k in changed}}


# --- reading --------------------------------------------------------------------------------

def page(sm: StateMachine, *, since_ms: int | None = None, actor: str | None = None,
         action: str | None = None, target: str | None = None, tenant: str | None = None,
         cursor: int | None = None, limit: int = 100,
         scan_max: int = 10_000) -> tuple[list[AuditEntry], int | None]:
    """Newest first: matching entries with id <= cursor (None: the newest), examining at most
    `scan_max`; the cursor of the next page (the next id to examine) or None."""
    entries = sm.audit.entries
    if not entries:
        return [], None
    last = entries[-1].id
    skip = last - (last if cursor is None else min(cursor, last))
    out: list[AuditEntry] = []
    scanned = 0
    for e in islice(reversed(entries), skip, None):   # a cursor before the first: none
        if len(out) >= limit or scanned >= scan_max:
            return out, e.id
        if since_ms is not None and e.at_ms < since_ms:
            return out, None          # the state clock never goes back: all older are older
        scanned += 1
        if (actor is None or e.actor == actor) and (action is None or e.action == action) \
                and (target is None or e.target == target) \
                and (tenant is None or e.tenant == tenant):
            out.append(e)
    return out, None
