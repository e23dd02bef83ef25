"""The node's aiohttp application: every resource's routes, in one error shape.

Everything a handler needs lives in the `Node` under `NODE` (no module globals). The
services' lifecycle (the proposer, the forwarder, the claim hub, the leader's timer and
the Raft apply listener) is the composition root's: `assembly.node_app` adds it.
"""
from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from tsched.statemachine.limits import API_LIMITS
from tsched.statemachine.tiers import DEFAULT_TIERS

from tsched.node.api import (archive, audit, auth, backup, cluster, keyed_limits, members,
                             monitoring, queues, schedules, sessions, tasks, tenants,
                             workers, workflows)
from tsched.node.api.validate import BODY_BYTES_MAX
from tsched.node.api.admission import ADMISSION, Admission
from tsched.node.api.read_budget import READ_BUDGET, ReadBudget
from tsched.node.api.jsonio import error_response, http_error
from tsched.node.services import NODE, Node
from tsched.node.errors import ApiError
from tsched.node.api.shard_tag import shard_tag_middleware

log = logging.getLogger("tsched.node.http")

def make_app(node: Node) -> web.Application:
    middlewares = [error_middleware]
    if node.shard is not None:
        middlewares.insert(0, shard_tag_middleware(node.shard))
    app = web.Application(client_max_size=BODY_BYTES_MAX, middlewares=middlewares)
    app[NODE] = node
    app[ADMISSION] = Admission(tiers=getattr(node.config, "tiers", DEFAULT_TIERS))
    app[READ_BUDGET] = read_budget_of(node)
    for module in (tasks, workers, tenants, cluster, members, schedules, archive, audit, backup,
                   keyed_limits, workflows, queues, sessions):
        app.router.add_routes(module.routes)
    monitoring.setup(app)    # metrics, health, stats, OpenAPI, dashboard (and its middleware)
    auth.setup(app)   # parses [auth] once; its middleware runs inside the error shape
    return app


def read_budget_of(node: Node) -> ReadBudget:
    """The node's budget of listing pages, from `[limits]` (a test's node without a
    cluster file: the defaults)."""
    cfg = node.config
    return ReadBudget(getattr(cfg, "list_pages_per_s", API_LIMITS.list_pages_per_s),
                      getattr(cfg, "list_burst_pages", API_LIMITS.list_burst_pages))


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    node = request.app[NODE]
    try:
        return await handler(request)
    except ApiError as e:
        return error_response(e, node.replica.applied_seq)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        resp = error_response(http_error(request, e), node.replica.applied_seq)
        resp.set_status(e.status)
        return resp
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("event=http_500 node=%s method=%s path=%s", node.node_id,
                      request.method, request.path)
        return error_response(ApiError("internal", "internal error (a bug; see the node log)"),
                              None)

