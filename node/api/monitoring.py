"""Operations routes: /healthz, /livez, /readyz, /metrics, /v1/stats, /v1/openapi.json and the
dashboard (`/` and `/static/{name}`).

`setup(app)` mounts them, the metrics middleware, and (at startup) the metrics apply listener.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from importlib import resources

import orjson
from aiohttp import web

from tsched.node.ops import metrics as metrics_mod
from tsched.node.api import member_probe, openapi, validate
from tsched.node.ops import timeseries
from tsched.node.api.admission import ADMISSION
from tsched.node.api.jsonio import error_status, respond
from tsched.node.api.reads import before_read
from tsched.node.raft.replica import Replica
from tsched.node.services import NODE
from tsched.node.api.scope import tenant_scope
from tsched.node.errors import ApiError, invalid
from tsched.statemachine.tiers import DEFAULT_TIERS

# A follower this many Raft entries behind what it knows to be committed is still catching
# up (a restart replaying its log, or a slow disk): not ready.
READY_LAG_ENTRIES_MAX = 1000

STATIC_TYPES = {"app.js": "text/javascript", "app.css": "text/css", "charts.js": "text/javascript",
                "graph.js": "text/javascript",
                # uPlot 1.6.32 (MIT, uPlot.LICENSE.txt), vendored from npm's `uplot` dist/
                "uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css",
                "uPlot.LICENSE.txt": "text/plain"}
# Assets are re-validated on each load so that a node upgrade shows at once.
STATIC_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
# The dashboard runs only its own script and talks only to its own origin.
DASHBOARD_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")

routes = web.RouteTableDef()


def _asset(name: str) -> bytes:
    return resources.files("tsched.node.api").joinpath("static", name).read_bytes()


# --- health ----------------------------------------------------------------------------------

@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """The process is up and serving HTTP; says nothing of Raft (see /readyz)."""
    node = request.app[NODE]
    return _json({"status": "ok", "node": node.node_id})


@routes.get("/livez")
async def livez(request: web.Request) -> web.Response:
    """Liveness (a Kubernetes liveness probe): the process answers HTTP, so its event loop
    runs. Like /healthz it says nothing of Raft: a node cut off from its peers is alive and
    must not be restarted for it (readiness, /readyz, takes it out of service instead)."""
    node = request.app[NODE]
    return _json({"status": "alive", "node": node.node_id})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    node = request.app[NODE]
    replica = node.replica
    removed = getattr(replica, "not_a_member_reason", lambda: None)() \
        or member_probe.removed_reason(request.app)
    if removed is not None:
        raise ApiError("unavailable", removed, {"node": node.node_id, "leader": None,
                                                "reason": "not_a_member"})
    reason = not_ready_reason(replica)
    if reason is not None:
        code = "no_leader" if replica.leader_id() is None else "unavailable"
        raise ApiError(code, reason, {"node": node.node_id, "leader": replica.leader_id()})
    return respond({"status": "ready", "node": node.node_id, "leader": replica.leader_id()},
                   replica.applied_seq)


def not_ready_reason(replica: Replica) -> str | None:
    """None when the node serves current data: it sees a leader with a quorum, and has
    applied (nearly) all it knows to be committed; else why not."""
    unhealthy = getattr(replica, "unhealthy_reason", lambda: None)()
    if unhealthy is not None:
        return unhealthy
    leader = replica.leader_id()
    if leader is None:
        return "no leader with a quorum is reachable"
    if leader == getattr(replica, "self_id", None) and not replica.is_ready_leader():
        return "leader has not applied its first barrier yet"
    applied = _raft_applied_index(replica)
    if applied is not None and replica.commit_index - applied > READY_LAG_ENTRIES_MAX:
        return f"catching up: {replica.commit_index - applied} committed entries not applied"
    return None


def _raft_applied_index(replica: Replica) -> int | None:
    # The Raft index last applied, as sampled on the Raft thread's tick (Replica._view).
    # status() would also do, but it takes the replica lock.
    view = getattr(replica, "_view", None)
    return getattr(view, "last_applied", None)


# --- metrics and stats -----------------------------------------------------------------------

@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    return await metrics_mod.handle_metrics(request)


@routes.get("/v1/stats")
async def stats(request: web.Request) -> web.StreamResponse:
    """Queue counts for the dashboard: the same numbers as the /metrics gauges, as JSON."""
    node = request.app[NODE]
    relayed = await before_read(request, node, extra=("tenant",))
    if relayed is not None:
        return relayed
    tenant = validate.tenant(request.query["tenant"]) if "tenant" in request.query else None
    scoped = tenant_scope(request)
    if scoped is not None:
        if tenant not in (None, scoped):
            raise ApiError("forbidden", "this token is scoped to another tenant")
        tenant = scoped
    m = request.app[metrics_mod.METRICS]
    view = m.queue_view()
    assert view is not None, "the metrics are made with this app's node, which has a replica"
    by_tenant = view.by_tenant if tenant is None else {
        tenant: view.by_tenant.get(tenant, {})}
    body = {
        "by_state": view.by_state if tenant is None else dict(by_tenant[tenant]),
        "by_priority": {str(p): n for p, n in sorted(view.by_priority.items())},
        "by_tenant": by_tenant,
        "oldest_claimable_age_s": view.oldest_claimable_age_s,
        "waiting_claims": m.waiting_claims(),
        "schedules": view.schedules,
    }
    if tenant is not None:
        # Priority counts, the lag and schedules are cluster-wide: not for one tenant's eyes.
        body["by_priority"], body["oldest_claimable_age_s"], body["schedules"] = {}, None, None
    return respond(body, node.replica.applied_seq)


TIMESERIES = web.AppKey("timeseries", timeseries.TimeSeries)


@routes.get("/v1/timeseries")
async def timeseries_json(request: web.Request) -> web.Response:
    """The last hour of this node's activity, per second or per minute (DESIGN 14.5)."""
    validate.query(request.query, ("step_s",))
    step = validate.query_int(request.query, "step_s", 1, 60, 60)
    if step not in timeseries.STEPS_S:
        raise invalid("step_s must be 1 or 60", field="step_s")
    return _json(request.app[TIMESERIES].read(int(time.time()), step))


# --- OpenAPI and the dashboard ---------------------------------------------------------------

@routes.get("/v1/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=openapi.document_bytes(), content_type="application/json")


@routes.get("/")
async def dashboard(request: web.Request) -> web.Response:
    return web.Response(body=_asset("index.html"), content_type="text/html", charset="utf-8",
                        headers={**STATIC_HEADERS, "Content-Security-Policy": DASHBOARD_CSP})


@routes.get("/static/{name}")
async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC_TYPES:   # a fixed list: no path ever reaches the file system
        raise ApiError("not_found", f"no asset {name!r}")
    return web.Response(body=_asset(name), content_type=STATIC_TYPES[name], charset="utf-8",
                        headers=STATIC_HEADERS)


def _json(body: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


# --- mounting --------------------------------------------------------------------------------

def setup(app: web.Application) -> None:
    """Mount the routes and the metrics middleware; bind metrics at startup."""
    # The lateness histogram's `tier` label uses the cluster's tier table (DESIGN 5.1).
    tiers = getattr(app[NODE].config, "tiers", None) if NODE in app else None
    app[metrics_mod.METRICS] = metrics_mod.NodeMetrics(tiers=tiers or DEFAULT_TIERS)
    app[metrics_mod.ERROR_STATUS] = error_status
    app.middlewares.append(metrics_mod.middleware)
    served = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}
    # A route another module already serves stays theirs (aiohttp refuses duplicates).
    app.router.add_routes([r for r in routes
                           if not (isinstance(r, web.RouteDef) and (r.method, r.path) in served)])
    app[TIMESERIES] = timeseries.TimeSeries(app[metrics_mod.METRICS])
    app.cleanup_ctx.append(_bind_metrics)
    app.cleanup_ctx.append(_sample_timeseries)


async def _sample_timeseries(app: web.Application) -> AsyncIterator[None]:
    node = app[NODE]

    def queue_depth() -> int | None:
        with node.replica.read() as sm:
            return len(sm.store.by_state["pending"])   # O(1), unlike sm.stats()

    task = asyncio.get_running_loop().create_task(
        timeseries.run_sampler(app[TIMESERIES], queue_depth))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _bind_metrics(app: web.Application) -> AsyncIterator[None]:
    node, m = app[NODE], app[metrics_mod.METRICS]
    m.admission = app.get(ADMISSION)        # its `busy` refusals are counted at scrape time
    live = True

    def listener(seq: int, cmds: list, results: list) -> None:   # Raft thread, replica lock
        if live:
            on_apply(seq, cmds, results)

    # Seeding and registering under one lock hold: no batch falls between the two.
    with node.replica.read():
        on_apply = m.attach(node)
        node.replica.add_apply_listener(listener)
    yield
    live = False
