"""Tenant endpoints: caps and weights (DESIGN.md section 7)."""
from __future__ import annotations

from typing import TypedDict

from aiohttp import web

from tsched.statemachine import commands as c
from tsched.statemachine.limits import LIMITS

from tsched.node import present
from tsched.node.api import validate
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.idempotency import request_id
from tsched.node.raft.commit import propose_one
from tsched.node.api.reads import before_read
from tsched.node.services import node_of
from tsched.node.api.scope import actor_of, tenant_scope
from tsched.node.errors import ApiError

routes = web.RouteTableDef()

RUNNING_MAX = LIMITS.tenant_running_max
WEIGHT_MAX = LIMITS.tenant_weight_max


def _tenant_param(request: web.Request) -> str:
    tenant = validate.tenant(request.match_info["tenant"])
    scope = tenant_scope(request)
    if scope is not None and scope != tenant:
        raise ApiError("not_found", f"no tenant {tenant}", {"tenant": tenant})
    return tenant


class TenantSettings(TypedDict):
    """A tenant's settings to change (None: keep)."""

    max_running: int | None
    weight: int | None


def tenant_settings(body: object) -> TenantSettings:
    f = validate.Fields(body)
    out: TenantSettings = {"max_running": None, "weight": None}
    if f.has("max_running"):
        out["max_running"] = validate.integer(f.get("max_running"), "max_running", 0, RUNNING_MAX)
    if f.has("weight"):
        out["weight"] = validate.integer(f.get("weight"), "weight", 1, WEIGHT_MAX)
    f.done()
    return out


@routes.put("/v1/tenants/{tenant}")
async def put_tenant(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    tenant = _tenant_param(request)
    if tenant_scope(request) is not None:
        raise ApiError("forbidden", "only an admin token may change tenant settings")
    settings = tenant_settings(await json_body(request) or {})
    cmd = c.SetTenant(request_id=request_id(request), now_ms=node.clock.now_ms(),
                      tenant=tenant, actor=actor_of(request), **settings)
    out, seq = await propose_one(node, cmd)
    return respond(out, seq)


@routes.get("/v1/tenants/{tenant}")
async def get_tenant(request: web.Request) -> web.Response:
    node = node_of(request)
    tenant = _tenant_param(request)
    relayed = await before_read(request, node)
    if relayed is not None:
        return relayed
    with node.replica.read() as sm:
        view = sm.get_tenant(tenant)
        if view is None:
            raise ApiError("not_found", f"no tenant {tenant}", {"tenant": tenant})
        out, seq = present.tenant(view), sm.seq
    return respond(out, seq)


@routes.get("/v1/tenants")
async def list_tenants(request: web.Request) -> web.Response:
    node = node_of(request)
    relayed = await before_read(request, node)
    if relayed is not None:
        return relayed
    scope = tenant_scope(request)
    with node.replica.read() as sm:
        views = [present.tenant(v) for v in sm.list_tenants()
                 if scope is None or v.tenant == scope]
        seq = sm.seq
    return respond({"tenants": views}, seq)
