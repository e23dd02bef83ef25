"""Task endpoints: submit, read, list, cancel, replay, discard (DESIGN.md section 7)."""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web

from tsched.statemachine import commands as c
from tsched.statemachine.limits import API_LIMITS
from tsched.statemachine.model import PENDING

from tsched.node import present
from tsched.node.api import submission, validate
from tsched.node.api.admission import Place, admission_of
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.idempotency import request_id
from tsched.node.raft.commit import propose_one
from tsched.node.api.read_budget import take_page
from tsched.node.api.reads import before_read
from tsched.node.services import Node, node_of
from tsched.node.api.scope import actor_of, tenant_scope
from tsched.node.errors import ApiError
from tsched.node.scheduling import submits
from tsched.node.scheduling.claim_request import ItemAnswer, JsonObject
from tsched.node.scheduling.submits import SubmitRequest

routes = web.RouteTableDef()


@routes.post("/v1/tasks")
async def submit(request: web.Request) -> web.Response:
    # Asked before the body is read: a busy node's refusal costs it little, and between
    # its soft and hard bounds only urgent submits are admitted (DESIGN 14.2, 5.1).
    with admission_of(request).submit() as place:
        return await _submit(request, place)


async def _submit(request: web.Request, place: Place) -> web.Response:
    """Parse (api/submission.py), decide (scheduling/submits.py), render."""
    node = node_of(request)
    validate.query(request.query, ())
    req = submission.parse_submit(request, await json_body(request), node)
    return render_submit(req, *await submits.submit(node, req, place))


def render_submit(req: SubmitRequest, answers: list[ItemAnswer], seq: int) -> web.Response:
    """One task's answer (the task), or a batch's `tasks` in order: one task or error
    object per task."""
    if not req.batch:
        return respond(cast(JsonObject, answers[0]), seq, status=201, minimal=req.minimal)
    return respond({"tasks": [a.body() if isinstance(a, ApiError) else a for a in answers]},
                   seq, status=201, minimal=req.minimal)


@routes.get("/v1/tasks/{task_id}")
async def get_task(request: web.Request) -> web.Response:
    node = node_of(request)
    tid = validate.task_id(request.match_info["task_id"])
    relayed = await before_read(request, node)
    if relayed is not None:
        return relayed
    with node.replica.read() as sm:
        t = sm.get_task(tid, tenant=tenant_scope(request))
        if t is None:
            raise ApiError("not_found", f"no task {tid}", {"task_id": tid})
        out, seq = present.task(t), sm.seq
        out["limited_by"] = present.limited_by(sm.store.limiter, t, sm.now_ms)
        out["paused"] = present.paused(sm.store.pauses, t)
        out["progress"] = present.progress(sm.store.progress.get(t.task_id))
        step = sm.step_of(tid)
        if step is not None:   # a workflow's step (DESIGN 5.2)
            out["workflow"] = {"workflow_id": step[0].workflow_id,
                               "step": step[0].steps[step[1]].name}
        pending = t.state == PENDING
    if pending:
        _hint_unclaimed_type(node, out)
    return respond(out, seq)


def _hint_unclaimed_type(node: Node, out: dict) -> None:
    """A pending task's `unclaimed_type`, from the types the leader saw claims for
    (scheduling/claimed_types.py): an object when no worker asked for its type within the
    window, null when one did; absent where this node cannot tell (not the ready leader,
    or it has not led for a whole window): advisory (DESIGN 14.1)."""
    if not node.replica.is_ready_leader():
        return
    seen = node.claimed_types
    told = seen.unclaimed(out["task_type"], node.replica.term, time.monotonic())
    if told is None:
        return
    window = f"{seen.window_s / 60:g} minutes" if seen.window_s >= 60 else f"{seen.window_s:g} s"
    out["unclaimed_type"] = None if not told else {
        "task_type": out["task_type"], "window_s": seen.window_s,
        "message": f"no worker has asked for task type {out['task_type']!r} in the last "
                   f"{window}: is a worker for it running?"}


@routes.get("/v1/tasks")
async def list_tasks(request: web.Request) -> web.Response:
    await take_page(request)     # this node's budget of listing pages (api/read_budget.py)
    node = node_of(request)
    relayed = await before_read(request, node, validate.TASK_FILTERS)
    if relayed is not None:
        return relayed
    filters = validate.task_filters(request.query)
    scope = tenant_scope(request)
    if scope is not None:
        if filters["tenant"] not in (None, scope):
            raise ApiError("forbidden", f"this token may only read tenant {scope!r}")
        filters["tenant"] = scope
    with node.replica.read() as sm:
        try:
            tasks, cursor = sm.list_tasks(**filters, scan_max=API_LIMITS.task_scan_max)
        except ValueError as e:  # a cursor that is not one of ours
            raise validate.invalid(f"bad cursor: {e}", field="cursor") from None
        out, seq = [present.task(t) for t in tasks], sm.seq
        # a cursor whose page starts at each task: where a router's merge keeps its place
        at = [str(t.seq + 1) for t in tasks]
    return respond({"tasks": out, "next_cursor": cursor, "item_cursors": at}, seq)


def _action(command_type: type[c.Cancel] | type[c.Replay] | type[c.Discard]
            ) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        node = node_of(request)
        validate.query(request.query, ())
        tid = validate.task_id(request.match_info["task_id"])
        validate.empty(await json_body(request))
        cmd = command_type(request_id=request_id(request), now_ms=node.clock.now_ms(),
                           task_id=tid, tenant=tenant_scope(request), actor=actor_of(request))
        task, seq = await propose_one(node, cmd)
        return respond(task, seq)
    return handler


routes.post("/v1/tasks/{task_id}/cancel")(_action(c.Cancel))
routes.post("/v1/tasks/{task_id}/replay")(_action(c.Replay))
routes.post("/v1/tasks/{task_id}/discard")(_action(c.Discard))
