"""Worker sessions through the router (DESIGN.md sections 9 and 13).

A worker of a sharded cluster holds tasks of every shard it claims from, and each shard's
leader judges liveness for its own group (its `SessionWatch`). So a keepalive or an end
goes to every shard at once (to each shard's leader first): one session per shard, under
the same worker id, all kept alive together. The answer joins the shards': `created` when
any shard (re)opened it, `given_back` summed, the shards' `applied_seqs`. A refusal from a
shard is the answer (a keepalive sent again is harmless). The listing joins every shard's
sessions, each with its `shard`.
"""
from __future__ import annotations

import asyncio

from aiohttp import web

from tsched.node.shards.merge import gather
from tsched.node.shards.router import ROUTER, as_response, json_response, with_min_seq
from tsched.node.shards.upstream import Answer

routes = web.RouteTableDef()


async def _everywhere(request: web.Request) -> list[Answer]:
    r = request.app[ROUTER]
    raw = await request.read() if request.can_read_body else b""
    return list(await asyncio.gather(*(
        r.send(request, s, request.method, request.raw_path, raw or None, to_leader=True)
        for s in range(r.up.count))))


def _joined(answers: list[Answer]) -> web.Response:
    docs = {s: a.json() for s, a in enumerate(answers) if a.status == 200}
    out = dict(next(iter(docs.values())))
    out.pop("applied_seq", None)
    out.pop("shard", None)
    out["created"] = any(d.get("created") for d in docs.values())
    out["given_back"] = sum(int(d.get("given_back") or 0) for d in docs.values())
    out["applied_seqs"] = {str(s): d.get("applied_seq") for s, d in docs.items()}
    return json_response(out)


@routes.put("/v1/sessions/{worker_id}")
async def keep_session(request: web.Request) -> web.Response:
    answers = await _everywhere(request)
    for a in answers:
        if a.status != 200:
            return as_response(a)
    return _joined(answers)


@routes.delete("/v1/sessions/{worker_id}")
async def end_session(request: web.Request) -> web.Response:
    """Ended wherever it was open; 404 only when no shard had it."""
    answers = await _everywhere(request)
    for a in answers:
        if a.status not in (200, 404):
            return as_response(a)
    if all(a.status == 404 for a in answers):
        return as_response(answers[0])
    return _joined(answers)


@routes.get("/v1/sessions")
async def list_sessions(request: web.Request) -> web.Response:
    r = request.app[ROUTER]
    docs = await gather(r, request, {s: with_min_seq(request, s) for s in range(r.up.count)})
    rows = [{**row, "shard": s} for s, d in sorted(docs.items())
            for row in d.get("sessions", [])]
    rows.sort(key=lambda row: (row["worker_id"], row["shard"]))
    return json_response({"sessions": rows,
                          "applied_seqs": {str(s): d.get("applied_seq")
                                           for s, d in docs.items()}})
