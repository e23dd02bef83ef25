"""Worker endpoints: long-poll claims, heartbeats, completions (DESIGN.md section 7).

Each reads: parse (api/claim_parsing.py: one typed request from the body and headers),
decide (scheduling/: claims.py, reports.py), render (one function per kind of answer)."""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web

from tsched.statemachine import commands as c

from tsched.node.scheduling import claims, reports
from tsched.node.scheduling.claim_hub import render_item
from tsched.node.scheduling.claim_request import (ClaimOutcome, ClaimRequest, ItemAnswer,
                                                  JsonObject, Reports)
from tsched.node.api import claim_parsing, validate
from tsched.node.api.claim_forwarding import claim_forward, head_forward, is_gone
from tsched.node.api.jsonio import json_body, prefers_minimal, respond
from tsched.node.api.idempotency import request_id, request_ids
from tsched.node.raft.commit import propose_one
from tsched.node.services import Node, node_of
from tsched.node.api.scope import tenant_scope

routes = web.RouteTableDef()


@routes.post("/v1/claims")
async def claim(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    raw = await request.read()
    body = await json_body(request)
    req = claim_parsing.parse_claim(request, body, node.config.tiers)  # the cluster's tiers
    if node.sessions is not None:   # a claim keeps its worker's session alive (at the leader)
        node.sessions.seen(req.worker_id)
    if req.head:     # the router's head read (DESIGN 13): nothing leased
        out = await claims.head(node, req, head_forward(node, request, raw))
    else:
        out = await claims.claim(node, req, lambda: is_gone(request),
                                 claim_forward(node, request, req, body))
    return render_claim(node, req, out)


def render_claim(node: Node, req: ClaimRequest, out: ClaimOutcome) -> web.Response:
    """A claim's answer: its tasks (a watch's `ready`), a head read's `head`, the carried
    completions' results."""
    if req.head:
        return respond({"tasks": [], "head": out.head}, out.seq)
    answer: dict[str, object] = {"tasks": out.tasks}
    if out.ready:
        answer["ready"] = True
    if out.completions is not None:
        answer["completions"] = out.completions
    # The leader's URL: a worker sends its next claim there, where a follower would only
    # forward it (each claim answered twice).
    return respond(answer, out.seq, minimal=req.minimal, leader_url=node.leader_url())


# --- heartbeats, completions and failures: one, or a batch ---------------------------------

@routes.post("/v1/tasks/{task_id}/heartbeat")
async def heartbeat(request: web.Request) -> web.Response:
    validate.query(request.query, ())
    item = claim_parsing.heartbeat(await json_body(request) or {},
                                   path_task_id=request.match_info["task_id"])
    parsed = Reports(heartbeats=(item,), request_ids=(request_id(request),),
                     tenant=tenant_scope(request))
    return render_reports(parsed, *await reports.report(node_of(request), parsed))


def _single_completion(failing: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        validate.query(request.query, ())
        item = claim_parsing.completion(await json_body(request) or {}, failing=failing,
                                        path_task_id=request.match_info["task_id"])
        parsed = Reports(completions=(item,), request_ids=(request_id(request),),
                         tenant=tenant_scope(request), minimal=prefers_minimal(request))
        return render_reports(parsed, *await reports.report(node_of(request), parsed))
    return handler


routes.post("/v1/tasks/{task_id}/complete")(_single_completion(False))
routes.post("/v1/tasks/{task_id}/fail")(_single_completion(True))


@routes.post("/v1/tasks/{task_id}/release")
async def release(request: web.Request) -> web.Response:
    """Give a claimed task back unrun, without using up a retry (a stopping worker)."""
    node = node_of(request)
    validate.query(request.query, ())
    f = validate.Fields(await json_body(request) or {})
    token = claim_parsing.fencing_token(f.get("fencing_token"))
    f.done()
    cmd = c.Release(request_id=request_id(request), now_ms=node.clock.now_ms(),
                    task_id=validate.task_id(request.match_info["task_id"]),
                    fencing_token=token, tenant=tenant_scope(request))
    task, seq = await propose_one(node, cmd)
    return respond(task, seq)


@routes.post("/v1/completions")
async def completions(request: web.Request) -> web.Response:
    parsed = await parse_batch(request, "completions")
    return render_reports(parsed, *await reports.report(node_of(request), parsed))


@routes.post("/v1/heartbeats")
async def heartbeats(request: web.Request) -> web.Response:
    """The batch may carry the worker's `slots` (busy and total): kept here if this node
    leads (scheduling/worker_slots.py), else dropped (the worker's claims reach the leader)."""
    node = node_of(request)
    body = await json_body(request)
    slots = claim_parsing.heartbeat_slots(body.pop("slots", None)) \
        if isinstance(body, dict) else None
    parsed = await parse_batch(request, "heartbeats", body)
    if slots is not None and node.replica.is_ready_leader():
        node.worker_slots.report(*slots, time.monotonic())
    return render_reports(parsed, *await reports.report(node, parsed))


async def parse_batch(request: web.Request, key: str, body: object = None) -> Reports:
    """A batch endpoint's request (its body, when read already): each item checked,
    request ids `#i` under the request's own."""
    validate.query(request.query, ())
    items = validate.batch(await json_body(request) if body is None else body, key)
    rid = request_ids(request)
    ids = tuple(rid(f"#{i}") for i in range(len(items)))
    scope = tenant_scope(request)
    if key == "heartbeats":
        return Reports(heartbeats=tuple(claim_parsing.heartbeat(it, f"{key}[{i}]")
                                        for i, it in enumerate(items)),
                       request_ids=ids, tenant=scope, batch=True)
    return Reports(completions=tuple(claim_parsing.completion(it, f"{key}[{i}]")
                                     for i, it in enumerate(items)),
                   request_ids=ids, tenant=scope, batch=True, minimal=prefers_minimal(request))


def render_reports(parsed: Reports, answers: list[ItemAnswer], seq: int) -> web.Response:
    """One item's answer (its task, or its heartbeat's), or a batch's `results` in order:
    one result or error object per item."""
    if not parsed.batch:
        return respond(cast(JsonObject, answers[0]), seq, minimal=parsed.minimal)
    return respond({"results": [render_item(a) for a in answers]}, seq,
                   minimal=parsed.minimal)
