"""Puts an app's periodic schedules, idempotently (what `tsworker` does when it starts).

An unchanged schedule is not written again (every worker of a fleet starts with the same
declarations: rewriting would make one Raft entry each and reset the schedule's
`updated_at`); one that changed is replaced, with a log line naming the fields; a schedule
the app did not declare is deleted only when pruning is asked for. A schedule paused by an
operator stays paused when its declaration changes.
"""
from __future__ import annotations

import datetime as _dt
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable

from .app_task import Periodic, Time
from .client import Client
from .errors import ApiError, Unavailable

log = logging.getLogger("tsched.tsworker")
DEFAULT_TENANT = "default"   # where a schedule without a tenant lands (admin token)
PERIODIC_PAYLOAD: dict[str, Any] = {"args": [], "kwargs": {}}   # a fire calls fn() / fn(ctx)


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)


def _epoch_ms(value: Time | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return round(value * 1000)
    when = value if isinstance(value, _dt.datetime) else \
        _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return round(when.timestamp() * 1000)


def _declared_fields(p: Periodic) -> dict[str, Any]:
    """The declaration in the stored schedule's terms: what a GET answer must show."""
    return {"cron": " ".join(p.cron.split()), "timezone": p.timezone, "overlap": p.overlap,
            "misfire": p.misfire, "catchup_window_s": p.catchup_window_s,
            "jitter_s": p.jitter_s, "start_at": _epoch_ms(p.start_at),
            "end_at": _epoch_ms(p.end_at), "task.task_type": p.task_type,
            "task.payload": PERIODIC_PAYLOAD,
            **{f"task.{k}": v for k, v in p.template.items() if k != "retry"},
            **{f"task.retry.{k}": v for k, v in (p.template.get("retry") or {}).items()}}


def _stored_fields(stored: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        value: Any = stored
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[name] = _epoch_ms(value) if name in ("start_at", "end_at") else value
    return out


def differences(p: Periodic, stored: dict[str, Any]) -> list[str]:
    """The fields in which the stored schedule differs from the declaration. A retry
    policy's fields are compared only where the declaration gives them."""
    want = _declared_fields(p)
    have = _stored_fields(stored, want)
    return [name for name in want if want[name] != have[name]]


def put(client: Client, p: Periodic, paused: bool | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = client.put_schedule(
        p.schedule_id, p.cron, p.task_type, PERIODIC_PAYLOAD, timezone=p.timezone,
        tenant=p.tenant, overlap=p.overlap, misfire=p.misfire,
        catchup_window_s=p.catchup_window_s, jitter_s=p.jitter_s, start_at=p.start_at,
        end_at=p.end_at, paused=paused, **p.template)
    return answer


def _stored(client: Client, p: Periodic) -> dict[str, Any] | None:
    try:
        stored: dict[str, Any] = client.get_schedule(p.schedule_id, tenant=p.tenant)
    except ApiError as exc:
        if exc.code == "not_found":
            return None
        raise
    return stored


def sync_one(client: Client, p: Periodic, report: SyncReport) -> str:
    """Creates, updates or leaves the schedule; returns the tenant it lives in."""
    stored = _stored(client, p)
    if stored is None:
        answer = put(client, p)
        report.created.append(p.schedule_id)
        log.info("schedule %s created: %s (%s) -> %s", p.schedule_id, p.cron, p.timezone,
                 p.task_type)
        return str(answer.get("tenant") or DEFAULT_TENANT)
    changed = differences(p, stored)
    if changed:
        put(client, p, paused=bool(stored.get("paused")))
        report.updated.append(p.schedule_id)
        log.info("schedule %s updated: %s changed", p.schedule_id, ", ".join(changed))
    else:
        report.unchanged.append(p.schedule_id)
        log.info("schedule %s unchanged", p.schedule_id)
    return str(stored.get("tenant") or DEFAULT_TENANT)


def _sync_named(client: Client, p: Periodic, report: SyncReport) -> str:
    """`sync_one`, whose refusal names the schedule (and its cron and task)."""
    try:
        return sync_one(client, p, report)
    except Unavailable:
        raise
    except ApiError as exc:
        raise ApiError(exc.code, f"schedule {p.schedule_id!r} ({p.cron!r}, "
                       f"{p.timezone}, task {p.task_type}): {exc.message}", exc.details,
                       exc.status) from None


def sync_schedules(client: Client, serve: Iterable[Periodic], declared: Iterable[str],
                   prune: bool = False, tenant: str | None = None) -> SyncReport:
    """Puts the schedules in `serve`. With `prune`, deletes the schedules of their tenants
    (or of `tenant`, when none is served) whose ids are not in `declared`."""
    report = SyncReport()
    tenants = {_sync_named(client, p, report) for p in serve}
    if prune:
        keep = set(declared)
        for t in sorted(tenants or {tenant or DEFAULT_TENANT}):
            for stored in list(client.list_schedules(tenant=t)):
                sid = stored.get("schedule_id")
                if isinstance(sid, str) and sid not in keep:
                    client.delete_schedule(sid, tenant=t)
                    report.pruned.append(sid)
                    log.info("schedule %s deleted (tenant %s): not declared by the app", sid, t)
    return report
