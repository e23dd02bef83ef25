"""Keyed limit endpoints (issue 46): PUT/GET/DELETE /v1/limits/{name}, GET /v1/limits, and a
worker's RateLimited report, POST /v1/tasks/{id}/rate-limited. Parse here, decide in the
state machine (statemachine/ratelimits.py), render with `present`."""
from __future__ import annotations

import re
from typing import TypedDict

from aiohttp import web

from tsched.statemachine import commands as c
from tsched.statemachine.limits import LIMITS, SECOND_MS

from tsched.node import present
from tsched.node.api import claim_parsing, validate
from tsched.node.api.idempotency import request_id
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.reads import before_read
from tsched.node.api.scope import actor_of, tenant_scope
from tsched.node.errors import ApiError, invalid
from tsched.node.raft.commit import propose_one
from tsched.node.services import node_of

routes = web.RouteTableDef()

NAME_CHARS_MAX = LIMITS.limit_name_chars_max
NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]+$")
# a payload field, or a dotted path into objects (`kwargs.account_id`)
FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*$")
PER_TASK_MAX = LIMITS.limits_per_task_max
RATE_MAX = LIMITS.limit_rate_max
PER_S_MAX = LIMITS.limit_per_ms_max // SECOND_MS
CONCURRENCY_MAX = LIMITS.limit_concurrency_max
AFTER_S_MAX = LIMITS.limit_pause_ms_max // SECOND_MS
PARTITIONS_SHOWN = 10   # the busiest partitions a limit's answer lists


def limit_name(value: object, field: str = "name") -> str:
    return validate.required_text(value, field, NAME_CHARS_MAX, pattern=NAME_RE)


def limit_names(value: object, field: str = "limits") -> tuple[str, ...]:
    """A task's `limits`: distinct names, at most PER_TASK_MAX (a missing one: none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > PER_TASK_MAX:
        raise invalid(f"{field} must be a list of at most {PER_TASK_MAX} limit names",
                      field=field)
    names = tuple(limit_name(v, f"{field}[{i}]") for i, v in enumerate(value))
    if len(set(names)) != len(names):
        raise invalid(f"{field} names a limit twice", field=field)
    return names


class LimitFields(TypedDict):
    rate: int
    per_ms: int
    concurrency: int
    partition_by: str | None


def limit_fields(body: object) -> LimitFields:
    """A PUT's body: `rate` per `per_s` (default 1 s) and/or `concurrency`, and
    `partition_by` ("tenant" or a top-level payload field)."""
    f = validate.Fields(body)
    rate = validate.integer(f.get("rate"), "rate", 1, RATE_MAX, default=0)
    per_ms = validate.seconds_ms(f.get("per_s"), "per_s", 0.001, PER_S_MAX, SECOND_MS)
    concurrency = validate.integer(f.get("concurrency"), "concurrency", 1, CONCURRENCY_MAX,
                                   default=0)
    by = validate.text(f.get("partition_by"), "partition_by", LIMITS.limit_field_chars_max, lo=0,
                       pattern=FIELD_RE)
    f.done()
    if not rate and not concurrency:
        raise invalid("a limit needs rate (with per_s) or concurrency, or both", field="rate")
    if f.has("per_s") and not rate:
        raise invalid("per_s needs rate", field="per_s")
    return {"rate": rate, "per_ms": per_ms, "concurrency": concurrency, "partition_by": by}


@routes.put("/v1/limits/{name}")
async def put_limit(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    name = limit_name(request.match_info["name"])
    fields = limit_fields(await json_body(request) or {})
    cmd = c.PutLimit(request_id=request_id(request), now_ms=node.clock.now_ms(), name=name,
                     actor=actor_of(request), **fields)
    await propose_one(node, cmd)
    return await _one(request, name)


@routes.delete("/v1/limits/{name}")
async def delete_limit(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    name = limit_name(request.match_info["name"])
    cmd = c.DeleteLimit(request_id=request_id(request), now_ms=node.clock.now_ms(), name=name,
                        actor=actor_of(request))
    out, seq = await propose_one(node, cmd)
    return respond(out, seq)


@routes.get("/v1/limits/{name}")
async def get_limit(request: web.Request) -> web.Response:
    name = limit_name(request.match_info["name"])
    relayed = await before_read(request, node_of(request))
    if relayed is not None:
        return relayed
    return await _one(request, name)


async def _one(request: web.Request, name: str) -> web.Response:
    node = node_of(request)
    shown = PARTITIONS_SHOWN if tenant_scope(request) is None else 0
    with node.replica.read() as sm:
        if name not in sm.store.limiter.defs:
            raise ApiError("not_found", f"no limit {name}", {"name": name})
        out, seq = present.limit_usage(sm.store.limiter, name, sm.now_ms, shown), sm.seq
    return respond(out, seq)


@routes.get("/v1/limits")
async def list_limits(request: web.Request) -> web.Response:
    node = node_of(request)
    relayed = await before_read(request, node)
    if relayed is not None:
        return relayed
    shown = PARTITIONS_SHOWN if tenant_scope(request) is None else 0
    with node.replica.read() as sm:
        limiter = sm.store.limiter
        out = [present.limit_usage(limiter, n, sm.now_ms, shown) for n in sorted(limiter.defs)]
        seq = sm.seq
    return respond({"limits": out}, seq)


@routes.post("/v1/tasks/{task_id}/rate-limited")
async def rate_limited(request: web.Request) -> web.Response:
    """A handler's RateLimited: pause the limit (the task's partition of it) for every
    worker for `after_s`; the task goes back to pending, its attempt not counted."""
    node = node_of(request)
    validate.query(request.query, ())
    f = validate.Fields(await json_body(request) or {})
    token = claim_parsing.fencing_token(f.get("fencing_token"))
    limit = limit_name(f.get("limit"), "limit")
    after_ms = validate.seconds_ms(f.get("after_s"), "after_s", 0.001, AFTER_S_MAX, SECOND_MS)
    f.done()
    cmd = c.PauseLimit(request_id=request_id(request), now_ms=node.clock.now_ms(),
                       task_id=validate.task_id(request.match_info["task_id"]),
                       fencing_token=token, limit=limit, after_ms=after_ms,
                       tenant=tenant_scope(request))
    task, seq = await propose_one(node, cmd)
    return respond(task, seq)
