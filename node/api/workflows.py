"""Workflow endpoints (DESIGN.md section 5.2): submit a graph, read one, list them by
tenant and state, cancel one; and what a step's task sees of its parents."""
from __future__ import annotations

from aiohttp import web

from tsched.statemachine import commands as c
from tsched.statemachine.graphs import WORKFLOW_STATES

from tsched.node import present
from tsched.node.api import validate, workflow_body
from tsched.node.api.admission import admission_of
from tsched.node.api.idempotency import request_id
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.read_budget import take_page
from tsched.node.api.reads import before_read
from tsched.node.api.scope import actor_of, tenant_scope
from tsched.node.errors import ApiError
from tsched.node.raft.commit import propose_one
from tsched.node.services import node_of

routes = web.RouteTableDef()


@routes.post("/v1/workflows")
async def submit(request: web.Request) -> web.Response:
    """All steps in one log entry, or none (a 4xx naming the step or the bound)."""
    node = node_of(request)
    validate.query(request.query, ())
    with admission_of(request).submit() as place:
        body = await json_body(request)
        scope = tenant_scope(request)
        count = len(workflow_body.steps_of(body))
        cmd = workflow_body.parse(
            body, now_ms=node.clock.now_ms(), request_id=request_id(request),
            workflow_id=node.new_task_id(), task_ids=[node.new_task_id() for _ in range(count)],
            default_tenant="default" if scope is None else scope)
        if scope is not None and cmd.tenant != scope:
            raise ApiError("forbidden", f"this token may only act for tenant {scope!r}")
        workflow_body.check_entry_size(cmd, node.replica.options.entry_bytes_max)
        place.admit(tuple(cmd.templates[row[2]][1] for row in cmd.steps if not row[4]))
        out, seq = await propose_one(node, cmd, sheddable=True, urgent=place.urgent)
    return respond(out, seq, status=201)


@routes.get("/v1/workflows/{workflow_id}")
async def get_workflow(request: web.Request) -> web.Response:
    node = node_of(request)
    wid = validate.name(request.match_info["workflow_id"], "workflow_id")
    relayed = await before_read(request, node)
    if relayed is not None:
        return relayed
    with node.replica.read() as sm:
        wf = sm.get_workflow(wid, tenant=tenant_scope(request))
        if wf is None:
            raise ApiError("not_found", f"no workflow {wid}", {"workflow_id": wid})
        out, seq = present.workflow(wf), sm.seq
    return respond(out, seq)


@routes.get("/v1/workflows")
async def list_workflows(request: web.Request) -> web.Response:
    await take_page(request)     # this node's budget of listing pages (api/read_budget.py)
    node = node_of(request)
    relayed = await before_read(request, node, ("state", "tenant", "limit", "cursor"))
    if relayed is not None:
        return relayed
    q = request.query
    state = q.get("state")
    if state is not None and state not in WORKFLOW_STATES:
        raise validate.invalid(f"state must be one of {', '.join(WORKFLOW_STATES)}",
                               field="state")
    who = validate.tenant(q["tenant"]) if "tenant" in q else None
    scope = tenant_scope(request)
    if scope is not None and who not in (None, scope):
        raise ApiError("forbidden", f"this token may only read tenant {scope!r}")
    limit = validate.query_int(q, "limit", 1, validate.LIST_LIMIT_MAX, 100)
    cursor = validate.text(q["cursor"], "cursor", validate.CURSOR_CHARS_MAX) \
        if "cursor" in q else None
    with node.replica.read() as sm:
        try:
            wfs, nxt = sm.list_workflows(scope or who, state, cursor, limit)
        except ValueError as e:
            raise validate.invalid(f"bad cursor: {e}", field="cursor") from None
        out, seq = [present.workflow(w, steps="none") for w in wfs], sm.seq
    return respond({"workflows": out, "next_cursor": nxt}, seq)


@routes.post("/v1/workflows/{workflow_id}/cancel")
async def cancel(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    wid = validate.name(request.match_info["workflow_id"], "workflow_id")
    validate.empty(await json_body(request))
    cmd = c.CancelWorkflow(request_id=request_id(request), now_ms=node.clock.now_ms(),
                           workflow_id=wid, tenant=tenant_scope(request),
                           actor=actor_of(request))
    out, seq = await propose_one(node, cmd)
    return respond(out, seq)


@routes.get("/v1/tasks/{task_id}/parents")
async def parents(request: web.Request) -> web.Response:
    """A step's parents (name -> state, result, error); a task that is no step has none."""
    node = node_of(request)
    tid = validate.task_id(request.match_info["task_id"])
    relayed = await before_read(request, node)
    if relayed is not None:
        return relayed
    scope = tenant_scope(request)
    with node.replica.read() as sm:
        found = sm.step_of(tid)
        if found is not None and scope in (None, found[0].tenant):
            out = present.parents(*found)
        elif sm.get_task(tid, tenant=scope) is not None:
            out = {"workflow_id": None, "step": None, "parents": {}}
        else:
            raise ApiError("not_found", f"no task {tid}", {"task_id": tid})
        seq = sm.seq
    return respond(out, seq)
