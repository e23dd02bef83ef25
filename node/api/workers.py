"""Worker endpoints: long-poll claims, heartbeats, completions (DESIGN.md section 7)."""
from __future__ import annotations

from typing import Any

from aiohttp import web

from tsched.statemachine import commands as c

from tsched.node.scheduling import claims
from tsched.node.api import claim_parsing, validate
from tsched.node.api.jsonio import json_body, prefers_minimal, respond
from tsched.node.api.idempotency import request_id, request_ids
from tsched.node.raft.commit import propose, propose_one
from tsched.node.services import node_of
from tsched.node.api.scope import tenant_scope

routes = web.RouteTableDef()


@routes.post("/v1/claims")
async def claim(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    raw = await request.read()
    body = await json_body(request)
    params = claim_parsing.claim(body, node.config.tiers)   # tier names: the cluster's table
    items = params.pop("completions")
    if items and claims.is_watch(request):
        raise validate.invalid("a watch (X-Tsched-Claim-Watch) carries no completions")
    if claims.is_head(request):     # the router's head read (DESIGN 13): nothing leased
        if items:
            raise validate.invalid("a head read (X-Tsched-Claim-Head) carries no completions",
                                   field="completions")
        found, seq = await claims.head(node, request, params, tenant_scope(request), raw)
        return respond({"tasks": [], "head": found}, seq)
    minimal = prefers_minimal(request)   # claimed tasks and carried completions
    done = None
    if items is not None:
        # Built here even when forwarded (the leader builds its own from the body): the
        # same checks, and `done.results` is where the answer's per-item results land.
        build, rid = _completion_builder(request), request_ids(request)
        cmds = [build(it, rid(f"#c{i}")) for i, it in enumerate(items)]
        done = claims.Completions(cmds, results=None if cmds else [], minimal=minimal)
    tasks, seq = await claims.claim(node, request, params, tenant_scope(request), raw, done,
                                    minimal)
    out: dict[str, Any] = {"tasks": tasks}
    if tasks is claims.READY:
        out["ready"] = True
    if done is not None:
        out["completions"] = done.results
    # The leader's URL: a worker sends its next claim there, where a follower would only
    # forward it (each claim answered twice).
    return respond(out, seq, minimal=minimal, leader_url=node.leader_url())


# A builder makes the commands of one request's items: what every item shares (the clock
# reading, the caller's scope, the failpoint) is read once per request, not once per item.
def _heartbeat_builder(request):
    now, scope = node_of(request).clock.now_ms(), tenant_scope(request)

    def build(item: dict, rid: str) -> c.Heartbeat:
        return c.Heartbeat(request_id=rid, now_ms=now, task_id=item["task_id"],
                           fencing_token=item["fencing_token"], lease_ms=item["lease_ms"],
                           tenant=scope)
    return build


def _completion_builder(request):
    node = node_of(request)
    now, scope = node.clock.now_ms(), tenant_scope(request)
    stale = node.replica.failpoints.on("accept_stale_tokens")

    def build(item: dict, rid: str):
        token = item["fencing_token"]
        if stale:
            token = _current_token(node, item["task_id"], token)
        if item["failing"]:
            return c.Fail(request_id=rid, now_ms=now, task_id=item["task_id"],
                          fencing_token=token, error=item["error"],
                          retryable=item["retryable"], tenant=scope,
                          retry_after_ms=item["retry_after_ms"])
        return c.Complete(request_id=rid, now_ms=now, task_id=item["task_id"],
                          fencing_token=token, result_json=item["result_json"], tenant=scope)
    return build


def _current_token(node, task_id: str, token: int) -> int:
    """The failpoint `accept_stale_tokens` (failpoints.py): the token the task holds now."""
    with node.replica.read() as sm:
        task = sm.get_task(task_id)
        return task.fencing_token if task is not None and task.fencing_token else token


@routes.post("/v1/tasks/{task_id}/heartbeat")
async def heartbeat(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    item = claim_parsing.heartbeat(await json_body(request) or {})
    item["task_id"] = validate.task_id(request.match_info["task_id"])
    out, seq = await propose_one(node, _heartbeat_builder(request)(item, request_id(request)))
    return respond(out, seq)


def _single_completion(failing: bool):
    async def handler(request: web.Request) -> web.Response:
        node = node_of(request)
        validate.query(request.query, ())
        item = claim_parsing.completion(await json_body(request) or {}, failing=failing)
        item["task_id"] = validate.task_id(request.match_info["task_id"])
        cmd = _completion_builder(request)(item, request_id(request))
        minimal = prefers_minimal(request)
        task, seq = await propose_one(node, cmd, minimal=minimal)
        return respond(task, seq, minimal=minimal)
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
    return await _batch(request, "completions", claim_parsing.completion, _completion_builder)


@routes.post("/v1/heartbeats")
async def heartbeats(request: web.Request) -> web.Response:
    return await _batch(request, "heartbeats", claim_parsing.heartbeat, _heartbeat_builder)


async def _batch(request: web.Request, key: str, parse, builder) -> web.Response:
    """A batch endpoint: each item validated, one command each (request ids `#i` under the
    request's own), all proposed together, and one result or error object per item."""
    node = node_of(request)
    validate.query(request.query, ())
    items = validate.batch(await json_body(request), key)
    build, rid = builder(request), request_ids(request)
    cmds = [build(parse(it, f"{key}[{i}]"), rid(f"#{i}")) for i, it in enumerate(items)]
    minimal = builder is _completion_builder and prefers_minimal(request)
    answers, seq = await propose(node, cmds, minimal=minimal)
    return respond({"results": [claims.render_item(a) for a in answers]}, seq, minimal=minimal)
