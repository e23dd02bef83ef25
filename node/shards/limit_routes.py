"""The router's keyed limit routes (issue 46; docs/DESIGN.md, "Keyed limits").

Every shard holds every limit's definition, and each enforces it on its own tasks. That is
exact only for a limit partitioned by tenant: a tenant's tasks all live in its one shard,
so its partition's window and running slots are all in one state machine. Any other limit
(one budget for all, or per payload field, whose values may span tenants and so shards)
would be enforced once per shard: S times the declared budget. Rather than approximate,
the router refuses it (409 `conflict`). A PUT or DELETE goes to every shard; reads sum
the shards' use (their partitions are disjoint: one tenant, one shard).
"""
from __future__ import annotations

from aiohttp import web

from tsched.node.api.keyed_limits import PARTITIONS_SHOWN, limit_name
from tsched.node.errors import ApiError
from tsched.node.shards.keyed_routes import loads
from tsched.node.shards.merge import gather
from tsched.node.shards.router import ROUTER, as_response, json_response

routes = web.RouteTableDef()
SHARDED_PARTITION = "tenant"   # the one partitioning a sharded cluster enforces exactly


@routes.put("/v1/limits/{name}")
async def put_limit(request: web.Request) -> web.Response:
    name = limit_name(request.match_info["name"])
    raw = await request.read()
    body = loads(raw)
    by = body.get("partition_by") if isinstance(body, dict) else None
    if isinstance(body, dict) and by != SHARDED_PARTITION:
        raise ApiError("conflict", f"limit {name}: on a sharded cluster a limit must be "
                       "partitioned by tenant (\"partition_by\": \"tenant\"); any other "
                       "would be counted once per shard, not exactly",
                       {"field": "partition_by", "partition_by": by})
    return await _everywhere(request, raw)


@routes.delete("/v1/limits/{name}")
async def delete_limit(request: web.Request) -> web.Response:
    limit_name(request.match_info["name"])
    return await _everywhere(request, None)


async def _everywhere(request: web.Request, raw: bytes | None) -> web.Response:
    """The write on every shard, in shard order; the first refusal is the answer (a retry
    with the same Idempotency-Key is safe: PUT and DELETE of a limit are idempotent)."""
    r = request.app[ROUTER]
    answer = None
    for shard in range(r.up.count):
        a = await r.send(request, shard, request.method, request.path_qs, raw or None)
        if a.status != 200:
            return as_response(a)
        answer = answer or a
    assert answer is not None, "a cluster has at least one shard"
    return as_response(answer)


@routes.get("/v1/limits/{name}")
async def get_limit(request: web.Request) -> web.Response:
    limit_name(request.match_info["name"])
    docs = await _gather(request)
    return json_response(_merge(list(docs.values())))


@routes.get("/v1/limits")
async def list_limits(request: web.Request) -> web.Response:
    docs = await _gather(request)
    by_name: dict[str, list[dict]] = {}
    for doc in docs.values():
        for item in doc.get("limits", []):
            by_name.setdefault(item["name"], []).append(item)
    return json_response({"limits": [_merge(by_name[n]) for n in sorted(by_name)]})


async def _gather(request: web.Request) -> dict[int, dict]:
    """Every shard's answer to this request's GET."""
    r = request.app[ROUTER]
    return await gather(r, request, {s: request.path_qs for s in range(r.up.count)})


def _merge(items: list[dict]) -> dict:
    """One limit's answers from every shard: its definition, the shards' use summed."""
    out = dict(items[0])
    out.pop("applied_seq", None)
    out.pop("shard", None)
    for key in ("in_use", "in_window", "held", "partition_count"):
        out[key] = sum(int(i.get(key, 0)) for i in items)
    parts = [p for i in items for p in i.get("partitions", [])]
    parts.sort(key=lambda p: (-(p["running"] + p["in_window"] + p["held"]), p["partition"]))
    out["partitions"] = parts[:PARTITIONS_SHOWN]
    return out
