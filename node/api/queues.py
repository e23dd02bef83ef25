"""Paused queues (issue 48): POST /v1/queues/pause and /v1/queues/resume with a selector
(`task_type`, `tenant`, or both), GET /v1/queues listing the pauses. Parse here, decide in
the state machine (statemachine/pauses.py, pause_commands.py), render with `present`.
Writes need an admin token (auth.py's table) and are audited (`queue.pause`,
`queue.resume`)."""
from __future__ import annotations

from typing import TypedDict

from aiohttp import web

from tsched.statemachine import commands as c
from tsched.statemachine.limits import LIMITS

from tsched.node import present
from tsched.node.api import validate
from tsched.node.api.idempotency import request_id
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.reads import before_read
from tsched.node.api.scope import actor_of, tenant_scope
from tsched.node.errors import invalid
from tsched.node.raft.commit import propose_one
from tsched.node.services import node_of

routes = web.RouteTableDef()

PAUSES_MAX = LIMITS.queue_pauses_max
REASON_CHARS_MAX = LIMITS.pause_reason_chars_max


class Selector(TypedDict):
    task_type: str | None
    tenant: str | None


def selector(f: validate.Fields) -> Selector:
    """`task_type` and/or `tenant` (at least one), checked as a submit checks them."""
    task_type = None
    if f.has("task_type"):
        task_type = validate.name(f.get("task_type"), "task_type", validate.TASK_TYPE_CHARS_MAX)
    tenant = validate.tenant(f.get("tenant")) if f.has("tenant") else None
    if task_type is None and tenant is None:
        raise invalid("name a task_type, a tenant, or both", field="task_type")
    return {"task_type": task_type, "tenant": tenant}


def pause_body(body: object) -> tuple[Selector, str | None]:
    """A pause's body: the selector and an optional `reason` (shown with the pause)."""
    f = validate.Fields(body)
    sel = selector(f)
    reason = validate.text(f.get("reason"), "reason", REASON_CHARS_MAX, lo=0,
                           pattern=validate.NAME_RE) if f.has("reason") else None
    f.done()
    return sel, reason or None


def resume_body(body: object) -> Selector:
    f = validate.Fields(body)
    sel = selector(f)
    f.done()
    return sel


@routes.post("/v1/queues/pause")
async def pause(request: web.Request) -> web.Response:
    """No claim takes the selector's pending tasks until a resume; they stay pending, their
    schedules fire. Pausing what is paused already changes nothing (`changed` false)."""
    node = node_of(request)
    validate.query(request.query, ())
    sel, reason = pause_body(await json_body(request))
    cmd = c.PauseQueue(request_id=request_id(request), now_ms=node.clock.now_ms(),
                       reason=reason, actor=actor_of(request), **sel)
    out, seq = await propose_one(node, cmd)
    return respond(out, seq)


@routes.post("/v1/queues/resume")
async def resume(request: web.Request) -> web.Response:
    """Lift the selector's pause (404 when it is not paused): its tasks are claimable again,
    in their claim order."""
    node = node_of(request)
    validate.query(request.query, ())
    sel = resume_body(await json_body(request))
    cmd = c.ResumeQueue(request_id=request_id(request), now_ms=node.clock.now_ms(),
                        actor=actor_of(request), **sel)
    out, seq = await propose_one(node, cmd)
    return respond(out, seq)


@routes.get("/v1/queues")
async def list_queues(request: web.Request) -> web.Response:
    """The standing pauses; a tenant token sees those that cover its tasks."""
    node = node_of(request)
    relayed = await before_read(request, node)
    if relayed is not None:
        return relayed
    with node.replica.read() as sm:
        out = [present.pause(p) for p in sm.store.pauses.listing(tenant_scope(request))]
        seq = sm.seq
    return respond({"pauses": out}, seq)
