"""The router's single-shard routes (by tenant or by task id) and its batch splitting."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from tsched.node.api import validate
from tsched.node.api.backup import H_SHARDS, relay_stream
from tsched.node.errors import ApiError
from tsched.node.tls import cluster_client_context
from tsched.node.shards.router import (DEFAULT_TENANT, ROUTER, Router, applied_preferences, as_response,
                     json_response)

routes = web.RouteTableDef()

READY_TIMEOUT_S = 2.0   # a shard process that does not answer its /readyz by then is not ready


def _router(request: web.Request) -> Router:
    return request.app[ROUTER]


def loads(raw: bytes) -> object:
    """The parsed body; None when it is not JSON (a shard answers the error)."""
    try:
        return orjson.loads(raw) if raw.strip() else None
    except orjson.JSONDecodeError:
        return None


async def to_any_shard(request: web.Request) -> web.StreamResponse:
    """Requests every shard answers alike: the dashboard, OpenAPI, cron preview, health."""
    r = _router(request)
    return await r.relay(request, r.up.any_shard())


# --- by tenant -------------------------------------------------------------------------------

def _tenant_of(r: Router, request: web.Request, item: object) -> str:
    tenant = item.get("tenant") if isinstance(item, dict) else None
    return tenant if tenant is not None else (r.scope(request) or DEFAULT_TENANT)


@routes.post("/v1/tasks")
async def submit(request: web.Request) -> web.Response:
    r = _router(request)
    raw = await request.read()
    body = loads(raw)
    items = body.get("tasks") if isinstance(body, dict) and len(body) == 1 else None
    if not isinstance(items, list) or not items:
        return await r.relay(request, r.tenant_shard(_tenant_of(r, request, body)), raw)
    if len(items) > validate.BATCH_MAX:
        raise ApiError("too_large", f"at most {validate.BATCH_MAX} tasks per batch",
                       {"limit": validate.BATCH_MAX})
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(r.tenant_shard(_tenant_of(r, request, item)), []).append(i)
    if len(groups) == 1:
        return await r.relay(request, next(iter(groups)), raw)
    return await split_batch(request, r, groups, "tasks", items, "tasks", status=201)


async def split_batch(request: web.Request, r: Router, groups: dict[int, list[int]],
                      key: str, items: list, answer_key: str, status: int = 200,
                      path: str | None = None) -> web.Response:
    """Propose each shard's part of a batch at once; answer in the request's order.

    Each part goes with the request's Idempotency-Key, so a retried batch is split the
    same way and every part applies once. A part that fails as a whole (a 4xx, a shard
    without a leader) is that part's error in each of its slots."""
    order = sorted(groups)
    sent = await asyncio.gather(*(
        r.send(request, s, "POST", path or request.path,
               orjson.dumps({key: [items[i] for i in groups[s]]})) for s in order),
        return_exceptions=True)
    results: list = [None] * len(items)
    seqs: dict[str, int] = {}
    for s, a in zip(order, sent):
        parts: list[object] | None
        if isinstance(a, BaseException):
            if not isinstance(a, ApiError):
                raise a
            parts = [a.body()] * len(groups[s])
        else:
            doc = a.json() or {}
            parts = doc.get(answer_key) if 200 <= a.status < 300 else None
            if not isinstance(parts, list) or len(parts) != len(groups[s]):
                if 400 <= a.status < 500:
                    return as_response(a)        # the request itself is malformed
                if "error" not in doc:
                    raise ApiError("unavailable", f"shard {s} answered {a.status}")
                parts = [{"error": doc["error"]}] * len(groups[s])
            if "applied_seq" in doc:
                seqs[str(s)] = doc["applied_seq"]
        for i, part in zip(groups[s], parts):
            results[i] = part
    return json_response({answer_key: results, "applied_seqs": seqs}, status,
                         applied_preferences(*sent))


@routes.post("/v1/workflows")
async def submit_workflow(request: web.Request) -> web.Response:
    """A workflow lives in its tenant's shard (DESIGN 5.2)."""
    r = _router(request)
    raw = await request.read()
    return await r.relay(request, r.tenant_shard(_tenant_of(r, request, loads(raw))), raw)


@routes.route("*", "/v1/tenants/{tenant}")
async def tenant(request: web.Request) -> web.Response:
    r = _router(request)
    return await r.relay(request, r.tenant_shard(request.match_info["tenant"]))


@routes.put("/v1/schedules/{schedule_id}")
async def put_schedule(request: web.Request) -> web.Response:
    r = _router(request)
    raw = await request.read()
    return await r.relay(request, r.tenant_shard(_tenant_of(r, request, loads(raw))), raw)


@routes.route("*", "/v1/schedules/{schedule_id}")
@routes.post("/v1/schedules/{schedule_id}/{action}")
async def schedule(request: web.Request) -> web.Response:
    r = _router(request)
    tenant = request.query.get("tenant") or r.scope(request) or DEFAULT_TENANT
    return await r.relay(request, r.tenant_shard(tenant))


# --- by task id ------------------------------------------------------------------------------

@routes.get("/v1/tasks/{task_id}")
@routes.get("/v1/tasks/{task_id}/parents")
@routes.post("/v1/tasks/{task_id}/{action}")
async def task(request: web.Request) -> web.Response:
    r = _router(request)
    tid = validate.task_id(request.match_info["task_id"])
    return await r.relay(request, await r.id_shard(request, tid))


@routes.get("/v1/workflows/{workflow_id}")
@routes.post("/v1/workflows/{workflow_id}/{action}")
async def workflow(request: web.Request) -> web.Response:
    """A workflow's id names its shard as a task id does (the node makes both alike)."""
    r = _router(request)
    wid = validate.name(request.match_info["workflow_id"], "workflow_id")
    return await r.relay(request, await r.id_shard(request, wid, "workflows"))


async def group_by_task(r: Router, request: web.Request, items: list
                        ) -> tuple[dict[int, list[int]], dict[int, dict]] | None:
    """The items' indexes by the shard of their `task_id`, and the errors of those whose
    shard does not exist; None when an item has no string `task_id` (a shard explains)."""
    groups: dict[int, list[int]] = {}
    missing: dict[int, dict] = {}
    for i, item in enumerate(items):
        tid = item.get("task_id") if isinstance(item, dict) else None
        if not isinstance(tid, str):
            return None
        try:
            s = await r.id_shard(request, validate.task_id(tid))
        except ApiError as e:
            if e.code != "not_found":
                raise
            missing[i] = e.body()
            continue
        groups.setdefault(s, []).append(i)
    return groups, missing


async def split_by_task(request: web.Request, r: Router, groups: dict[int, list[int]],
                        missing: dict[int, dict], key: str, items: list,
                        path: str | None = None) -> web.Response:
    """`split_batch` by task id, with the not-found items' errors in their slots."""
    resp = await split_batch(request, r, groups, key, items, "results", path=path)
    if missing and resp.status == 200:
        assert isinstance(resp.body, bytes), "split_batch answers with JSON bytes"
        doc = orjson.loads(resp.body)
        for i, err in missing.items():
            doc["results"][i] = err
        resp = json_response(doc, headers=applied_preferences(resp))
    return resp


def _batch_route(key: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        r = _router(request)
        raw = await request.read()
        body = loads(raw)
        items = body.get(key) if isinstance(body, dict) else None
        if not isinstance(items, list) or not items or len(items) > validate.BATCH_MAX:
            return await r.relay(request, r.up.any_shard(), raw)   # the shard explains
        grouped = await group_by_task(r, request, items)
        if grouped is None:
            return await r.relay(request, r.up.any_shard(), raw)
        groups, missing = grouped
        if len(groups) == 1 and not missing:
            return await r.relay(request, next(iter(groups)), raw)
        return await split_by_task(request, r, groups, missing, key, items)
    return handler


routes.post("/v1/completions")(_batch_route("completions"))
routes.post("/v1/heartbeats")(_batch_route("heartbeats"))


@routes.post("/v1/cluster/transfer-leadership")
async def transfer(request: web.Request) -> web.Response:
    """Shard 0's leadership, or the shard named by the body's `shard` (the field is the
    router's: the shard process does not see it)."""
    r = _router(request)
    raw = await request.read()
    body = loads(raw)
    if not isinstance(body, dict) or "shard" not in body:
        return await r.relay(request, 0, raw)
    shard = body.pop("shard")
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < r.count:
        raise validate.invalid(f"shard must be an integer in 0..{r.count - 1}", field="shard")
    return await r.relay(request, shard, orjson.dumps(body))


@routes.get("/livez")
async def livez(request: web.Request) -> web.Response:
    """Liveness of the node's own process (the router): it answers HTTP. Its shard
    processes are the supervisor's to restart, and a replica cut off from its group is a
    matter for /readyz, so neither is asked (a Kubernetes liveness probe must not restart
    a node for them)."""
    return web.json_response({"status": "alive", "node": _router(request).node_id})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Ready when every shard replica of this node is (a node without replicas: when any
    shard answers ready); otherwise the first shard's refusal. Each replica is asked
    alone: another node's answer for a replica of this node that is not up yet would let
    a rolling restart move on to the next node too early (docs/operations.md 6)."""
    r = _router(request)
    shards = r.up.local or [r.up.any_shard()]
    answers = await asyncio.gather(*(r.send(request, s, "GET", "/readyz", None,
                                            timeout_s=READY_TIMEOUT_S, local_only=True)
                                     for s in shards))
    for a in answers:
        if a.status != 200:
            return as_response(a)
    return as_response(answers[0])


@routes.get("/v1/cluster/backup")
async def backup(request: web.Request) -> web.StreamResponse:
    """One shard's backup section (`?shard=s`, default 0), streamed from the replica on the
    node its leader was last seen on (that replica relays to its leader if it moved on)."""
    r = _router(request)
    validate.query(request.query, ("shard",))
    shard = validate.query_int(request.query, "shard", 0, r.count - 1, 0)
    url = r.up.leader_first(shard)
    return await relay_stream(request, url, cluster_client_context(r.cfg), {},
                              answer_headers={H_SHARDS: str(r.count)})

