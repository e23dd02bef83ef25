"""Worker sessions (DESIGN.md sections 7 and 9): open or keep alive, end, list.

`PUT /v1/sessions/{worker_id}` opens the worker's session or keeps it alive. Liveness is
the leader's (scheduling/session_watch.py), so the request is served there: a follower relays it
to the leader. At the leader, a session that exists with the same timeout is only noted as
heard (no Raft write: a keepalive costs one HTTP round trip); a new one, or a new timeout,
is an `OpenSession` through the log. `DELETE` ends it (`EndSession`, not expired: a worker
stopping), on any node. `GET /v1/sessions` lists the sessions (`min_seq`, `consistency` as
any read); the leader's answer (`consistency=linearizable`) also says how long it has not
heard from each worker (`silent_s`; null elsewhere).
"""
from __future__ import annotations

from aiohttp import web

from tsched.statemachine import commands as c
from tsched.statemachine.limits import LIMITS

from tsched.node.api import validate
from tsched.node.api.idempotency import request_id
from tsched.node.api.jsonio import LEADER_HEADER, json_body, respond
from tsched.node.api.reads import before_read, relay_to_leader
from tsched.node.api.scope import tenant_scope
from tsched.node.present import rfc3339, seconds
from tsched.node.raft.commit import propose_one
from tsched.node.services import Node, node_of

routes = web.RouteTableDef()

TIMEOUT_S_MIN = LIMITS.session_timeout_ms_min / 1000
TIMEOUT_S_MAX = LIMITS.session_timeout_ms_max / 1000
TIMEOUT_MS_DEFAULT = 5_000   # a client that names none: a few keepalives may be lost


def _worker_id(request: web.Request) -> str:
    return validate.name(request.match_info["worker_id"], "worker_id")


@routes.put("/v1/sessions/{worker_id}")
async def keep_session(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    worker_id = _worker_id(request)
    f = validate.Fields(await json_body(request) or {})
    timeout_ms = validate.seconds_ms(f.get("timeout_s"), "timeout_s", TIMEOUT_S_MIN,
                                     TIMEOUT_S_MAX, TIMEOUT_MS_DEFAULT)
    f.done()
    replica = node.replica
    if replica.leader_id() != node.node_id or not replica.is_ready_leader():
        relayed = await relay_to_leader(request, node)
        leader_url = node.leader_url()
        if leader_url is not None:   # keepalives and claims go there next (as a claim's)
            relayed.headers[LEADER_HEADER] = leader_url
        return relayed
    scope = tenant_scope(request)
    with replica.read() as sm:
        session = sm.sessions.get(worker_id)
        kept = session is not None and session.timeout_ms == timeout_ms \
            and (scope is None or session.tenant == scope)
        known = session.record() if kept and session is not None else None
        seq = replica.applied_seq
    if known is None:
        cmd = c.OpenSession(request_id=request_id(request), now_ms=node.clock.now_ms(),
                            worker_id=worker_id, timeout_ms=timeout_ms, tenant=scope)
        answer, seq = await propose_one(node, cmd)
    else:
        answer = _shown(known)
    _heard(node, worker_id)
    return respond(dict(answer), seq, leader_url=node.leader_url())


def _heard(node: Node, worker_id: str) -> None:
    if node.sessions is not None:
        node.sessions.seen(worker_id)


def _shown(record: list) -> dict:
    worker_id, tenant, timeout_ms, opened_ms = record
    return {"worker_id": worker_id, "tenant": tenant, "timeout_s": seconds(timeout_ms),
            "opened_at": rfc3339(opened_ms), "created": False, "given_back": 0}


@routes.delete("/v1/sessions/{worker_id}")
async def end_session(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    cmd = c.EndSession(request_id=request_id(request), now_ms=node.clock.now_ms(),
                       worker_id=_worker_id(request), tenant=tenant_scope(request))
    answer, seq = await propose_one(node, cmd)
    return respond(dict(answer), seq)


@routes.get("/v1/sessions")
async def list_sessions(request: web.Request) -> web.Response:
    node = node_of(request)
    relayed = await before_read(request, node)   # `consistency=linearizable`: the leader's
    if relayed is not None:
        return relayed
    scope = tenant_scope(request)
    with node.replica.read() as sm:
        rows = [s.record() for w, s in sorted(sm.sessions.items())
                if scope is None or s.tenant == scope]
        seq = node.replica.applied_seq
    out = []
    for row in rows:
        shown = _shown(row)
        del shown["created"], shown["given_back"]
        silent = node.sessions.silent_s(row[0]) if node.sessions is not None else None
        shown["silent_s"] = None if silent is None else round(silent, 3)
        out.append(shown)
    return respond({"sessions": out}, seq)
