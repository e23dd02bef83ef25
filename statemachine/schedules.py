"""Handlers that act on schedules: put, delete, pause, resume, and fire.

The node computes every fire time (cron and time zones stay out of the state machine,
DESIGN section 3): PutSchedule, ResumeSchedule and Fire carry `next_fire_ms`. A Fire makes
one task per occurrence, with an id derived from the occurrence (rules.py), so a fire
proposed twice makes one task.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from . import audit, codec
from . import commands as c
from . import validate as V
from .errors import INVALID_STATE, NOT_FOUND, TENANT_LIMIT
from .model import PENDING, FireRecord, Schedule, Task
from .results import Answer, fire_answer, gone_schedule_answer, schedule_answer
from .rules import fire_jitter_ms, occurrence_task_id
from .tasks import add
from .tenants import check_capacity
from .validate import Rejected

if TYPE_CHECKING:
    from .machine import StateMachine


def find(sm: StateMachine, cmd: V.Unchecked) -> Schedule:
    """The command's schedule."""
    V.schedule_ref(cmd, sm.limits)
    sched = sm.schedules.get((cmd.tenant, cmd.schedule_id))
    if sched is None:
        raise Rejected(NOT_FOUND, f"schedule {cmd.schedule_id} not found",
                       schedule_id=cmd.schedule_id)
    return sched


def _answer(sched: Schedule) -> Answer:
    return schedule_answer(sched.tenant, sched.schedule_id)


def put_schedule(sm: StateMachine, cmd: c.PutSchedule) -> Answer:
    """Create or replace; a replacement keeps the fire history and created_at."""
    lim = sm.limits
    V.put_schedule(cmd, lim)
    key = (cmd.tenant, cmd.schedule_id)
    old = sm.schedules.get(key)
    if old is None:
        if len(sm.schedules) >= lim.schedules_max:
            raise Rejected(TENANT_LIMIT, f"at most {lim.schedules_max} schedules",
                           limit=lim.schedules_max)
        if sm.store.schedules_per_tenant.get(cmd.tenant, 0) >= lim.schedules_per_tenant_max:
            raise Rejected(TENANT_LIMIT, f"tenant {cmd.tenant} has "
                           f"{lim.schedules_per_tenant_max} schedules",
                           limit=lim.schedules_per_tenant_max)
    sched = Schedule(sys.intern(cmd.tenant), cmd.schedule_id, cmd.cron, cmd.timezone,
                     cmd.template, cmd.overlap, cmd.misfire, cmd.catchup_window_ms,
                     cmd.paused, cmd.start_at_ms, cmd.end_at_ms, cmd.jitter_ms,
                     cmd.next_fire_ms, old.created_at_ms if old else sm.now_ms,
                     sm.now_ms, old.fires if old else None)
    if old is None:
        sm.store.index_schedule(sched)
    else:
        sm.schedules[key] = sched
        sm.store.watch_fire(sched)
    _audit(sm, cmd, "schedule.put", sched, audit.diff(
        audit.schedule_fields(old) if old else None, audit.schedule_fields(sched)))
    return _answer(sched)


def _audit(sm: StateMachine, cmd: c.Command, action: str, sched: Schedule,
           change: dict | None) -> None:
    audit.record(sm, cmd, action, sched.tenant, f"{sched.tenant}/{sched.schedule_id}", change)


def _paused(before: bool, sched: Schedule) -> dict:
    return {"before": {"paused": before}, "after": {"paused": sched.paused}}


def delete_schedule(sm: StateMachine, cmd: c.DeleteSchedule) -> Answer:
    sched = find(sm, cmd)
    sm.store.unindex_schedule(sched)
    _audit(sm, cmd, "schedule.delete", sched, audit.diff(audit.schedule_fields(sched), None))
    return gone_schedule_answer(codec.schedule_record(sched))


def pause_schedule(sm: StateMachine, cmd: c.PauseSchedule) -> Answer:
    sched = find(sm, cmd)
    before = sched.paused
    if not sched.paused:
        sched.paused = True
        sched.updated_at_ms = sm.now_ms
    _audit(sm, cmd, "schedule.pause", sched, _paused(before, sched))
    return _answer(sched)


def resume_schedule(sm: StateMachine, cmd: c.ResumeSchedule) -> Answer:
    """Resuming a running schedule changes nothing (its next fire stays)."""
    V.resume(cmd, sm.limits)
    sched = find(sm, cmd)
    before = sched.paused
    if sched.paused:
        sched.paused = False
        sched.next_fire_ms = cmd.next_fire_ms
        sched.updated_at_ms = sm.now_ms
        sm.store.watch_fire(sched)
    _audit(sm, cmd, "schedule.resume", sched, _paused(before, sched))
    return _answer(sched)


def fire(sm: StateMachine, cmd: c.Fire) -> Answer:
    """Paused: nothing (manual: invalid_state). See `_manual` and `_cron`."""
    V.fire(cmd, sm.limits)
    sched = find(sm, cmd)
    if sched.paused:
        if cmd.manual:
            raise Rejected(INVALID_STATE, f"schedule {sched.schedule_id} is paused")
        return fire_answer(sched.tenant, sched.schedule_id, None)
    task_id = occurrence_task_id(sched.tenant, sched.schedule_id, cmd.fire_ms, cmd.manual,
                                 cmd.shard)
    if cmd.manual:
        answer = _manual(sm, sched, cmd, task_id)
        _audit(sm, cmd, "schedule.trigger", sched, {"task_id": answer[4][2]})
        return answer
    return _cron(sm, sched, cmd, task_id)


def _manual(sm: StateMachine, sched: Schedule, cmd: c.Fire, task_id: str) -> Answer:
    """A trigger: runs now unless its occurrence exists or the overlap policy skips it."""
    if task_id in sm.tasks:
        return fire_answer(sched.tenant, sched.schedule_id, task_id)
    skipped = _overlapping(sm, sched)
    if not skipped:
        check_capacity(sm, sched.tenant)   # before any change: a clean 429
    return _run(sm, sched, cmd.fire_ms, task_id, skipped)


def _cron(sm: StateMachine, sched: Schedule, cmd: c.Fire, task_id: str) -> Answer:
    """Cron fires apply only at the schedule's next_fire_ms (a repeat creates nothing).
    Misfire: older than catchup_window -> "missed"; with misfire "skip", later than
    `misfire_skip_grace_ms` -> "skipped". Overlap "skip": any live occurrence skips;
    "buffer_one": a pending occurrence skips."""
    nothing = fire_answer(sched.tenant, sched.schedule_id, None)
    if cmd.fire_ms != sched.next_fire_ms:
        return nothing
    sched.next_fire_ms = cmd.next_fire_ms
    sm.store.watch_fire(sched)
    if sched.end_at_ms is not None and cmd.fire_ms > sched.end_at_ms:
        sched.next_fire_ms = None
        return nothing
    if sched.start_at_ms is not None and cmd.fire_ms < sched.start_at_ms:
        return nothing
    late_ms = sm.now_ms - cmd.fire_ms
    if late_ms > sched.catchup_window_ms:
        return _record(sm, sched, cmd.fire_ms, "missed")
    if sched.misfire == "skip" and late_ms > sm.limits.misfire_skip_grace_ms:
        return _record(sm, sched, cmd.fire_ms, "skipped")
    if task_id in sm.tasks:
        return fire_answer(sched.tenant, sched.schedule_id, task_id)
    skipped = _overlapping(sm, sched)
    if not skipped:
        try:
            check_capacity(sm, sched.tenant)
        except Rejected:
            skipped = True   # the schedule already advanced: record, do not fail
    return _run(sm, sched, cmd.fire_ms, task_id, skipped)


def _overlapping(sm: StateMachine, sched: Schedule) -> bool:
    live = sm.store.occurrences.get((sched.tenant, sched.schedule_id), {})
    if sched.overlap == "skip":
        return bool(live)
    if sched.overlap == "buffer_one":
        return any(t.state == PENDING for t in live.values())
    return False


def _run(sm: StateMachine, sched: Schedule, fire_ms: int, task_id: str, skipped: bool) -> Answer:
    if skipped:
        return _record(sm, sched, fire_ms, "skipped")
    t = sched.template
    sm.task_seq += 1
    run_at_ms = fire_ms + fire_jitter_ms(sched.schedule_id, fire_ms, sched.jitter_ms)
    task = Task(task_id, sched.tenant, sys.intern(t.task_type), t.payload_json, t.priority,
                run_at_ms, t.max_retries, t.retry, t.timeout_ms, None, sched.schedule_id,
                sm.now_ms, sm.task_seq)
    add(sm, task)
    return _record(sm, sched, fire_ms, "ran", task)


def _record(sm: StateMachine, sched: Schedule, fire_ms: int, outcome: str,
            task: Task | None = None) -> Answer:
    task_id = task.task_id if task else None
    sched.fires.append(FireRecord(fire_ms, outcome, task_id))
    if len(sched.fires) > sm.limits.fires_kept:
        del sched.fires[0]
    return fire_answer(sched.tenant, sched.schedule_id, task_id)
