"""Schedule endpoints and the cron preview (DESIGN.md section 7).

The node validates the expression and zone, and computes every fire time it proposes
(`next_fire_ms` on create and resume): time-zone data may differ between hosts, so the
state machine only ever sees instants (DESIGN.md section 3, rule 1). A schedule is named
by its id in the path and its tenant (`tenant` in the PUT body, elsewhere the `tenant`
query parameter; default `default`, or the token's tenant).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict

from aiohttp import web

from tsched.statemachine import commands as c
from tsched.statemachine.limits import API_LIMITS, LIMITS, SECOND_MS
from tsched.statemachine.model import Schedule

from tsched.node.scheduling import cron, firing
from tsched.node import present
from tsched.node.api import submission, validate
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.idempotency import request_id
from tsched.node.raft.commit import propose_one
from tsched.node.api.reads import before_read
from tsched.node.services import node_of
from tsched.node.api.scope import actor_of, tenant_scope
from tsched.node.errors import ApiError, invalid

routes = web.RouteTableDef()

OVERLAPS = ("allow", "skip", "buffer_one")
MISFIRES = ("run_all", "run_once", "skip")
# Bounds from statemachine/limits.py, in the API's units.
CATCHUP_WINDOW_S_MAX = LIMITS.catchup_window_ms_max // SECOND_MS
JITTER_S_MAX = LIMITS.jitter_ms_max // SECOND_MS
PREVIEW_COUNT_MAX = API_LIMITS.cron_preview_fires_max
DEFAULT_TENANT = "default"
# Read-only fields of a schedule as GET shows it: a PUT of that body back is accepted.
ECHOED = ("schedule_id", "next_fire_at", "fires", "created_at", "updated_at", "applied_seq")


# --- request parsing -------------------------------------------------------------------------

def _schedule_id(request: web.Request) -> str:
    return validate.name(request.match_info["schedule_id"], "schedule_id")


def _tenant_query(request: web.Request) -> str:
    q = request.query
    scope = tenant_scope(request)
    tenant = validate.tenant(q.get("tenant"), default=scope or DEFAULT_TENANT)
    _check_scope(scope, tenant)
    return tenant


def _check_scope(scope: str | None, tenant: str | None) -> None:
    if scope is not None and tenant != scope:
        raise ApiError("forbidden", f"this token may only act for tenant {scope!r}")


def parse_spec(expr: object, zone: object, schedule_id: str = "") -> cron.CronSpec:
    expr_text = validate.required_text(expr, "cron", cron.EXPR_CHARS_MAX)
    zone_text = validate.text(zone, "timezone", cron.ZONE_CHARS_MAX, default="UTC")
    try:
        return cron.parse(expr_text, zone_text, schedule_id)
    except cron.CronError as e:
        raise invalid(str(e), field="timezone" if "time zone" in str(e) else "cron") from None


def _template(value: object) -> c.TaskTemplate:
    f = validate.Fields(value, "task")
    out = c.TaskTemplate(
        task_type=validate.name(f.get("task_type"), "task.task_type",
                                validate.TASK_TYPE_CHARS_MAX),
        payload_json=validate.json_text(f.get("payload"), "task.payload"),
        priority=validate.integer(f.get("priority"), "task.priority", 0,
                                  validate.PRIORITY_MAX, default=5),
        timeout_ms=validate.seconds_ms(f.get("timeout_s"), "task.timeout_s",
                                       validate.TIMEOUT_S_MIN, validate.TIMEOUT_S_MAX, 300_000),
        max_retries=validate.integer(f.get("max_retries"), "task.max_retries", 0,
                                     validate.MAX_RETRIES_MAX, default=3),
        retry=submission.retry_policy(f.get("retry")),
    )
    f.done()
    return out


def _choice(value: object, name: str, allowed: tuple[str, ...]) -> str:
    if value is None:
        return allowed[0]
    if not isinstance(value, str) or value not in allowed:
        raise invalid(f"{name} must be one of {', '.join(allowed)}", field=name)
    return value


def put_command(body: object, *, schedule_id: str, now_ms: int, request_id: str,
                scope: str | None, actor: str | None = None) -> c.PutSchedule:
    f = validate.Fields(body)
    if f.has("schedule_id") and f.get("schedule_id") != schedule_id:
        raise invalid("schedule_id in the body differs from the path", field="schedule_id")
    for key in ECHOED:
        f.get(key)
    tenant = validate.tenant(f.get("tenant"), default=scope or DEFAULT_TENANT)
    _check_scope(scope, tenant)
    spec = parse_spec(f.get("cron"), f.get("timezone"), schedule_id)
    start_ms = validate.instant_ms(f.get("start_at"), "start_at") if f.has("start_at") else None
    end_ms = validate.instant_ms(f.get("end_at"), "end_at") if f.has("end_at") else None
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise invalid("end_at is before start_at", field="end_at")
    if not f.has("task"):
        raise invalid("task is required (at least task.task_type)", field="task")
    cmd = c.PutSchedule(
        request_id=request_id, now_ms=now_ms, tenant=tenant, schedule_id=schedule_id,
        cron=spec.expr, timezone=spec.timezone, template=_template(f.get("task")),
        overlap=_choice(f.get("overlap"), "overlap", OVERLAPS),
        misfire=_choice(f.get("misfire"), "misfire", MISFIRES),
        catchup_window_ms=validate.seconds_ms(f.get("catchup_window_s"), "catchup_window_s", 0,
                                              CATCHUP_WINDOW_S_MAX, 60_000),
        paused=validate.boolean(f.get("paused"), "paused", False),
        start_at_ms=start_ms, end_at_ms=end_ms,
        jitter_ms=validate.seconds_ms(f.get("jitter_s"), "jitter_s", 0, JITTER_S_MAX, 0),
        next_fire_ms=firing.next_in_window(spec, now_ms, start_ms, end_ms), actor=actor,
    )
    f.done()
    return cmd


def _flat(out: Mapping[str, dict[str, object]]) -> dict[str, object]:
    """A schedule command's rendered result as the API answers it: the schedule itself."""
    body = dict(out["schedule"])
    if "task" in out:  # a trigger: the occurrence it created (None when overlap skipped it)
        body["fired_task"] = out["task"]
    return body


# --- handlers --------------------------------------------------------------------------------

@routes.put("/v1/schedules/{schedule_id}")
async def put_schedule(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    sid = _schedule_id(request)
    cmd = put_command(await json_body(request), schedule_id=sid, now_ms=node.clock.now_ms(),
                      request_id=request_id(request), scope=tenant_scope(request),
                      actor=actor_of(request))
    out, seq = await propose_one(node, cmd)
    return respond(_flat(out), seq)


@routes.get("/v1/schedules/{schedule_id}")
async def get_schedule(request: web.Request) -> web.Response:
    node = node_of(request)
    sid = _schedule_id(request)
    relayed = await before_read(request, node, ("tenant",))
    if relayed is not None:
        return relayed
    tenant = _tenant_query(request)
    with node.replica.read() as sm:
        s = sm.get_schedule(tenant, sid)
        if s is None:
            raise ApiError("not_found", f"no schedule {sid}", {"schedule_id": sid})
        out, seq = present.schedule(s), sm.seq
    return respond(out, seq)


@routes.get("/v1/schedules")
async def list_schedules(request: web.Request) -> web.Response:
    node = node_of(request)
    relayed = await before_read(request, node, ("tenant", "limit", "cursor"))
    if relayed is not None:
        return relayed
    q = request.query
    scope = tenant_scope(request)
    tenant = validate.tenant(q["tenant"]) if "tenant" in q else scope
    if scope is not None:
        _check_scope(scope, tenant)
    limit = validate.query_int(q, "limit", 1, validate.LIST_LIMIT_MAX, 100)
    cursor = validate.text(q["cursor"], "cursor", 512) if "cursor" in q else None
    with node.replica.read() as sm:
        try:
            page, nxt = sm.list_schedules(tenant=tenant, cursor=cursor, limit=limit)
        except ValueError as e:
            raise invalid(f"bad cursor: {e}", field="cursor") from None
        out, seq = [present.schedule(s) for s in page], sm.seq
    return respond({"schedules": out, "next_cursor": nxt}, seq)


@routes.delete("/v1/schedules/{schedule_id}")
async def delete_schedule(request: web.Request) -> web.Response:
    return await _act(request, lambda base, s: c.DeleteSchedule(**base))


@routes.post("/v1/schedules/{schedule_id}/pause")
async def pause_schedule(request: web.Request) -> web.Response:
    return await _act(request, lambda base, s: c.PauseSchedule(**base))


@routes.post("/v1/schedules/{schedule_id}/resume")
async def resume_schedule(request: web.Request) -> web.Response:
    def command(base: ScheduleRef, s: Schedule) -> c.ResumeSchedule:
        spec = parse_spec(s.cron, s.timezone, s.schedule_id)
        nxt = firing.next_in_window(spec, base["now_ms"], s.start_at_ms, s.end_at_ms)
        return c.ResumeSchedule(next_fire_ms=nxt, **base)
    return await _act(request, command)


@routes.post("/v1/schedules/{schedule_id}/trigger")
async def trigger_schedule(request: web.Request) -> web.Response:
    # A manual fire at now: its own occurrence, the schedule's next fire is unchanged.
    shard = node_of(request).shard
    return await _act(request, lambda base, s: c.Fire(
        fire_ms=base["now_ms"], next_fire_ms=None, manual=True, shard=shard, **base))


class ScheduleRef(TypedDict):
    """The fields every command on one schedule has."""

    request_id: str
    now_ms: int
    tenant: str
    schedule_id: str
    actor: str | None


async def _act(request: web.Request,
               make: Callable[[ScheduleRef, Schedule], c.Command]) -> web.Response:
    """An action on one existing schedule: `make(common fields, schedule) -> command`."""
    node = node_of(request)
    validate.query(request.query, ("tenant",))
    sid = _schedule_id(request)
    tenant = _tenant_query(request)
    validate.empty(await json_body(request))
    with node.replica.read() as sm:
        s = sm.get_schedule(tenant, sid)
        if s is None:
            raise ApiError("not_found", f"no schedule {sid}", {"schedule_id": sid})
        base: ScheduleRef = {"request_id": request_id(request), "now_ms": node.clock.now_ms(),
                "tenant": tenant, "schedule_id": sid, "actor": actor_of(request)}
        cmd = make(base, s)
    out, seq = await propose_one(node, cmd)
    return respond(_flat(out), seq)


@routes.get("/v1/cron/preview")
async def cron_preview(request: web.Request) -> web.Response:
    node = node_of(request)
    q = request.query
    validate.query(q, ("cron", "timezone", "from", "count", "schedule_id"))
    hash_id = validate.name(q["schedule_id"], "schedule_id") if "schedule_id" in q else ""
    spec = parse_spec(q.get("cron"), q.get("timezone"), hash_id)
    from_ms = _query_instant(q["from"], "from") if "from" in q else node.clock.now_ms()
    count = validate.query_int(q, "count", 1, PREVIEW_COUNT_MAX, 10)
    fires = [cron.format_local(ms, spec.zone) for ms in cron.fires(spec, from_ms, count)]
    return respond({"cron": spec.expr, "timezone": spec.timezone, "fires": fires},
                   node.replica.applied_seq)


def _query_instant(raw: str, name: str) -> int:
    """RFC 3339 or epoch seconds, as a query string."""
    value: float | str
    try:
        value = float(raw)
    except ValueError:
        value = raw
    return validate.instant_ms(value, name)
