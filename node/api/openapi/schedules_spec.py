"""The schedules' part of the OpenAPI document: schedules and the cron preview
(api/schedules.py)."""
from __future__ import annotations

from tsched.node.api import schedules as schedules_api
from tsched.node.api import validate as v
from tsched.node.api.openapi.schema import (
    ANY_JSON, APPLIED_SEQ, APPLIED_SEQS, NAME, PRIORITY, READ_PARAMS, SHARD, TASK_TYPE, TENANT,
    TIME, TIME_IN, TIMEOUT_S, WRITE_ERRORS, Fragment, PathItem, Schema, integer, nullable,
    number, obj, op, path_param, query, ref, string)
from tsched.node.scheduling import cron

SCHEDULE_ID = path_param("schedule_id", "the schedule's id (unique per tenant)")
SCHEDULE_TENANT = query("tenant", TENANT, "the schedule's tenant (default: default)")


def _schedule_put() -> Schema:
    template = obj({
        "task_type": TASK_TYPE,
        "payload": {**ANY_JSON, "description": f"JSON, at most {v.PAYLOAD_BYTES_MAX} bytes"},
        "priority": PRIORITY,
        "timeout_s": TIMEOUT_S,
        "max_retries": integer(0, v.MAX_RETRIES_MAX),
        "retry": ref("RetryPolicy"),
    }, ("task_type",), closed=True)
    # A schedule as GET shows it may be PUT back: its read-only fields are accepted, ignored.
    echoed = {k: {"readOnly": True, "description": "accepted and ignored"}
              for k in schedules_api.ECHOED}
    return obj({
        "schedule_id": {**NAME, "description": "must equal the path's, when given"},
        "tenant": {**TENANT, "default": "default"},
        "cron": string(cron.EXPR_CHARS_MAX, 1, "5 fields, or 6 with seconds first; @daily etc.; L W # H"),
        "timezone": {**string(cron.ZONE_CHARS_MAX, 1), "default": "UTC",
                     "description": "IANA zone"},
        "task": template,
        "overlap": {"type": "string", "enum": list(schedules_api.OVERLAPS),
                    "default": "allow"},
        "misfire": {"type": "string", "enum": list(schedules_api.MISFIRES),
                    "default": "run_all"},
        "catchup_window_s": {**number(0, schedules_api.CATCHUP_WINDOW_S_MAX), "default": 60},
        "paused": {"type": "boolean", "default": False},
        "start_at": TIME_IN,
        "end_at": TIME_IN,
        "jitter_s": {**number(0, schedules_api.JITTER_S_MAX), "default": 0},
        **{k: val for k, val in echoed.items() if k != "schedule_id"},
    }, ("cron", "task"), closed=True)


def _schedule() -> Schema:
    outcomes = ["ran", "skipped", "missed"]
    fire = obj({"fire_at": TIME, "outcome": {"type": "string", "enum": outcomes},
                "task_id": nullable(string())})
    return obj({
        "schedule_id": string(), "tenant": string(), "cron": string(), "timezone": string(),
        "task": {"type": "object"},
        "overlap": string(), "misfire": string(), "catchup_window_s": {"type": "number"},
        "paused": {"type": "boolean"},
        "start_at": nullable(TIME), "end_at": nullable(TIME), "jitter_s": {"type": "number"},
        "next_fire_at": nullable(TIME),
        "fires": {"type": "array", "items": fire, "description": "recent fires, newest last"},
        "created_at": TIME, "updated_at": TIME,
        "fired_task": {**nullable(ref("Task")),
                       "description": "trigger only: the occurrence it created (null when "
                                      "the overlap policy skipped it)"},
        "applied_seq": APPLIED_SEQ, "shard": SHARD,
    }, ("schedule_id", "tenant", "cron", "timezone", "next_fire_at", "fires"))


def _action(summary: str, body: Schema | None = None) -> Schema:
    """An operation on one schedule (put, delete, pause, resume, trigger)."""
    return op(summary, ref("Schedule"), body=body, params=[SCHEDULE_ID, SCHEDULE_TENANT],
              errors=WRITE_ERRORS, tag="schedules")


def _preview() -> Schema:
    return op(
        "Preview cron fires", obj({
            "cron": string(), "timezone": string(), "applied_seq": APPLIED_SEQ, "shard": SHARD,
            "fires": {"type": "array", "items": string(
                description="RFC 3339 in the given zone, with its offset")}}, ("fires",)),
        params=[{**query("cron", string(cron.EXPR_CHARS_MAX, 1)), "required": True},
                query("timezone", {**string(cron.ZONE_CHARS_MAX, 1), "default": "UTC"}),
                query("from", TIME_IN, "default: now"),
                query("count", {**integer(1, schedules_api.PREVIEW_COUNT_MAX),
                                "default": 10}),
                query("schedule_id", NAME, "seeds the H fields as that schedule's")],
        tag="schedules")


def _paths() -> dict[str, PathItem]:
    sched = ref("Schedule")
    return {
        "/v1/schedules": {"get": op(
            "List schedules", obj({"schedules": {"type": "array", "items": sched},
                                   "next_cursor": nullable(string()),
                                   "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                   "applied_seqs": APPLIED_SEQS}, ("schedules",)),
            params=[query("tenant", TENANT),
                    query("limit", {**integer(1, v.LIST_LIMIT_MAX), "default": 100}),
                    query("cursor", string(512)), *READ_PARAMS],
            errors=(503, 504), tag="schedules")},
        "/v1/schedules/{schedule_id}": {
            "put": _action("Put a schedule", body=ref("SchedulePut")),
            "get": op("Get a schedule", sched, params=[SCHEDULE_ID, SCHEDULE_TENANT,
                                                       *READ_PARAMS],
                      errors=(404, 503, 504), tag="schedules"),
            "delete": _action("Delete a schedule"),
        },
        "/v1/schedules/{schedule_id}/pause": {"post": _action("Pause a schedule")},
        "/v1/schedules/{schedule_id}/resume": {"post": _action("Resume a schedule")},
        "/v1/schedules/{schedule_id}/trigger": {"post": _action("Trigger a schedule now")},
        "/v1/cron/preview": {"get": _preview()},
    }


def fragment() -> Fragment:
    return Fragment(_paths(), {"SchedulePut": _schedule_put(), "Schedule": _schedule()})
