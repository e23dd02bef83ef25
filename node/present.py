"""State machine objects -> API JSON (DESIGN.md sections 5 and 7).

Times are RFC 3339 UTC with milliseconds and `Z`; durations are seconds; payloads and
results are JSON values. Called under the replica lock, straight after apply or during a
read, because the objects are live.
"""
from __future__ import annotations

import datetime as _dt
from typing import Any

import orjson

from tsched.statemachine.reads import retrying, status

from .errors import from_result

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


_SECONDS_CACHED_MAX = 4096
_second_prefix: dict[int, str] = {}   # epoch second -> "YYYY-MM-DDTHH:MM:SS" (a pure cache)


def rfc3339(ms: int | None) -> str | None:
    """Epoch ms -> "2026-12-01T15:00:00.000Z". Rendering is on the hot path of every
    answer, and instants cluster around now: the per-second prefix is cached."""
    if ms is None:
        return None
    sec, milli = divmod(ms, 1000)
    prefix = _second_prefix.get(sec)
    if prefix is None:
        if len(_second_prefix) >= _SECONDS_CACHED_MAX:
            _second_prefix.clear()
        t = _EPOCH + _dt.timedelta(seconds=sec)
        prefix = _second_prefix[sec] = t.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{prefix}.{milli:03d}Z"


def seconds(ms: int | None) -> int | float | None:
    """ms -> seconds, as an int when whole (30 rather than 30.0)."""
    if ms is None:
        return None
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def json_value(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def retry(policy) -> dict[str, Any]:
    return {
        "backoff": policy.backoff,
        "base_s": seconds(policy.base_ms),
        "max_s": seconds(policy.max_ms),
        "multiplier": policy.multiplier_milli / 1000,
        "jitter": policy.jitter_permille / 1000,
    }


_DETAIL_KEYS = ("type", "message", "traceback")


def error_detail(text: str | None) -> dict[str, str] | None:
    """A stored error's detail `{type, message, traceback}` (DESIGN 14.1), or None for a
    plain string: the node stores a detailed error as the compact JSON of exactly these
    keys, in this order (validate.error_text)."""
    if not text or not text.startswith('{"type":'):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or tuple(value) != _DETAIL_KEYS:
        return None
    return value


def error_line(text: str | None) -> str | None:
    """A stored error as one readable string: "Type: message" for a detailed one."""
    detail = error_detail(text)
    if detail is None:
        return text
    return f"{detail['type']}: {detail['message']}" if detail["message"] else detail["type"]


def attempt(a) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "worker_id": a.worker_id,
        "fencing_token": a.fencing_token,
        "started_at": rfc3339(a.started_at_ms),
        "ended_at": rfc3339(a.ended_at_ms),
        "outcome": a.outcome,
        "error": error_line(a.error),
        "error_detail": error_detail(a.error),
    }


def task(t, *, duplicate: bool | None = None) -> dict[str, Any]:
    out = {
        "task_id": t.task_id,
        "tenant": t.tenant,
        "task_type": t.task_type,
        "state": t.state,
        "status": status(t),
        "next_retry_at": rfc3339(t.run_at_ms) if retrying(t) else None,
        "payload": json_value(t.payload_json),
        "priority": t.priority,
        "run_at": rfc3339(t.run_at_ms),
        "attempt": t.attempt,
        "max_retries": t.max_retries,
        "retry": retry(t.retry),
        "timeout_s": seconds(t.timeout_ms),
        "idempotency_key": t.idempotency_key,
        "execution_id": t.execution_id,
        "schedule_id": t.schedule_id,
        "lease_expires_at": rfc3339(t.lease_expires_at_ms),
        "fencing_token": t.fencing_token,
        "worker_id": t.worker_id,
        "cancel_requested": bool(t.cancel_requested),
        "last_error": error_line(t.last_error),
        "result": json_value(t.result_json),
        "created_at": rfc3339(t.created_at_ms),
        "started_at": rfc3339(t.started_at_ms),
        "completed_at": rfc3339(t.completed_at_ms),
        "attempts": [attempt(a) for a in t.attempts],
    }
    if duplicate is not None:
        out["duplicate"] = duplicate
    return out


def tenant(v) -> dict[str, Any]:
    return {"tenant": v.tenant, "max_running": v.max_running, "weight": v.weight,
            "running": v.running, "pending": v.pending}


def template(t) -> dict[str, Any]:
    return {"task_type": t.task_type, "payload": json_value(t.payload_json),
            "priority": t.priority, "timeout_s": seconds(t.timeout_ms),
            "max_retries": t.max_retries, "retry": retry(t.retry)}


def schedule(s) -> dict[str, Any]:
    return {
        "schedule_id": s.schedule_id,
        "tenant": s.tenant,
        "cron": s.cron,
        "timezone": s.timezone,
        "task": template(s.template),
        "overlap": s.overlap,
        "misfire": s.misfire,
        "catchup_window_s": seconds(s.catchup_window_ms),
        "paused": bool(s.paused),
        "start_at": rfc3339(s.start_at_ms),
        "end_at": rfc3339(s.end_at_ms),
        "jitter_s": seconds(s.jitter_ms),
        "next_fire_at": rfc3339(s.next_fire_ms),
        "fires": [{"fire_at": rfc3339(f.fire_ms), "outcome": f.outcome, "task_id": f.task_id}
                  for f in s.fires],
        "created_at": rfc3339(s.created_at_ms),
        "updated_at": rfc3339(s.updated_at_ms),
    }


def result(cmd, res):
    """A command's result as the API shows it: a dict/list, None, or an errors.ApiError.

    The Proposer calls this on the Raft thread under the replica lock, straight after
    apply, because results hold live references (internals.md)."""
    if not res.ok:
        return from_result(res)
    v = res.value
    if v is None:
        return None
    if "lease_expires_at_ms" in v:
        return {"task_id": cmd.task_id, "lease_expires_at": rfc3339(v["lease_expires_at_ms"]),
                "cancel_requested": bool(v.get("cancel_requested"))}
    if "tasks" in v:
        return [task(t) for t in v["tasks"]]
    if "schedule" in v:
        out = {"schedule": schedule(v["schedule"])}
        if "task" in v:
            out["task"] = None if v["task"] is None else task(v["task"])
        return out
    if "tenant" in v:
        return tenant(v["tenant"])
    if "task" in v:
        duplicate = v.get("duplicate")
        return task(v["task"], duplicate=None if duplicate is None else bool(duplicate))
    return None
