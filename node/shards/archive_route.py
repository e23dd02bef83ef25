"""`GET /v1/archive` on a node with several shards (DESIGN 14.3, 13): each shard replica
archives under its own data dir, so the router sends the search to the shard that holds
what it looks for: a tenant's shard, the shard a task id names, or (a cursor's next page)
the shard that made the cursor. An id naming no shard (an old `s-` occurrence id) is asked
of the shards in turn until one has a record of it."""
from __future__ import annotations

from aiohttp import web

from tsched.node.api.archive import decode_cursor
from tsched.node import topology as shards_mod
from tsched.node.shards.router import ROUTER, as_response

routes = web.RouteTableDef()


@routes.get("/v1/archive")
async def archive(request: web.Request) -> web.Response:
    r = request.app[ROUTER]
    q = request.query
    cursor, task_id, tenant = q.get("cursor"), q.get("task_id"), q.get("tenant")
    shard: int | None = 0          # what a shard refuses, any shard refuses alike
    if cursor is not None:
        made_by = decode_cursor(cursor)["s"]
        shard = made_by if made_by is not None and made_by < r.count else 0
    elif tenant is not None and task_id is None:
        shard = r.tenant_shard(tenant)
    elif task_id is not None and tenant is None:
        shard = shards_mod.shard_of_task_id(task_id, r.count)
        if shard == -1:
            shard = 0              # no such shard: shard 0 answers "no records"
    if shard is not None:
        return await r.relay(request, shard)
    answer = None
    for s in range(r.count):
        answer = await r.send(request, s, "GET", request.path_qs, None)
        doc = answer.json() if answer.status == 200 else None
        if not isinstance(doc, dict) or doc.get("records") or doc.get("next_cursor"):
            break       # an error, or this shard has it
    assert answer is not None, "a cluster has at least one shard"
    return as_response(answer)
