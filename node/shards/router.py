"""The public HTTP API of a node whose cluster has several shards (DESIGN.md section 13).

It holds no state machine: every request goes to the shard processes. Tenant-scoped
requests go to their tenant's shard, task requests to the shard named by the task id,
batches are split by shard and answered in the request's order, listings and stats merge
the shards, and claims gather tasks from every shard (`claim_fanout.py`). Answers from one
shard pass through as bytes (the shard process already named its shard in them).

This module holds what the handlers share: the Router (sending, relaying, finding a
task's shard) and the answer helpers. The handlers are keyed_routes.py, merge.py and claim_fanout.py;
shards/router_app.py puts them into one aiohttp application.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict

import orjson
from aiohttp import web

from tsched.node import topology as shards_mod
from tsched.node.api import validate
from tsched.node.api.auth import parse as parse_auth
from tsched.node.config import ClusterConfig
from tsched.node.errors import ApiError
from tsched.node.shards.upstream import PASS_REQUEST_HEADERS, Answer, Upstreams

DEFAULT_TENANT = "default"
# Cron occurrence ids made before occurrences named their shard (`s-...`, not `s03-...`)
# carry no shard number, nor do ids restored into another shard count (DESIGN.md section
# 6.1): the router remembers the shard of those it has seen, else asks every shard.
ID_CACHE_MAX = 100_000


class Router:
    """What the router's handlers share; one per app, held under ROUTER."""

    def __init__(self, cfg: ClusterConfig, node_id: str, upstreams: Upstreams) -> None:
        self.cfg, self.node_id, self.up = cfg, node_id, upstreams
        self.count = upstreams.count
        self.auth = parse_auth(cfg.auth)
        self.ids: OrderedDict[str, int] = OrderedDict()
        # restored from a backup of another shard count: ids may name their old shard
        self.resharded = shards_mod.resharded_from(cfg.node(node_id)) is not None
        self.rotation = 0        # which shard a claim asks first; moves on every claim
        self.polls: dict[tuple, list] = {}   # open shard long polls by claim kind
        self.productive: dict[tuple, int] = {}   # claim kind -> the shard that last gave tasks
        # work (task types, prefetch, scope) -> {shard: open watches}: such a shard has no
        # claimable work of that kind, or its watch would have answered (scheduling/claims.py)
        self.watching: dict[tuple, dict[int, int]] = {}

    # -- who --
    def scope(self, request: web.Request) -> str | None:
        """The tenant a scoped token acts for (the shard process checks the token again)."""
        if self.auth is None:
            return None
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return None
        identity = self.auth.identify(header[7:].strip())
        return identity.tenant if identity is not None and identity.kind == "tenant" else None

    def tenant_shard(self, tenant: object) -> int:
        if not isinstance(tenant, str):
            return 0      # not a tenant name: any shard answers the validation error
        return shards_mod.shard_of_tenant(tenant, self.count)

    def remember(self, task_id: str, shard: int) -> None:
        if not self.resharded and shards_mod.shard_of_task_id(task_id, self.count) is not None:
            return
        self.ids[task_id] = shard
        self.ids.move_to_end(task_id)
        while len(self.ids) > ID_CACHE_MAX:
            self.ids.popitem(last=False)

    async def id_shard(self, request: web.Request, task_id: str,
                       resource: str = "tasks") -> int:
        """The shard holding `task_id`. On a re-sharded cluster (DESIGN.md section 6.1) an
        id's prefix may name its old shard: the named shard is asked first, then the
        others (at most `count` requests in all), and the answer is kept in `ids`.
        `resource`: where the id is asked for (a workflow's id: "workflows")."""
        s = shards_mod.shard_of_task_id(task_id, self.count)
        if not self.resharded:
            if s is not None and s >= 0:
                return s
            if s == -1:
                raise ApiError("not_found", f"no task {task_id} (its shard does not exist)",
                               {"task_id": task_id})
        if task_id in self.ids:
            return self.ids[task_id]
        named = [s] if s is not None and s >= 0 else []
        for group in (named, [i for i in range(self.count) if i not in named]):
            found = await self._ask(request, task_id, group, resource) if group else None
            if found is not None:
                self.remember(task_id, found)
                return found
        raise ApiError("not_found", f"no task {task_id}", {"task_id": task_id})

    async def _ask(self, request: web.Request, task_id: str, group: list[int],
                   resource: str = "tasks") -> int | None:
        """The shard of `group` that has `task_id`; None when every one answers 404."""
        path = f"/v1/{resource}/{task_id}"
        answers = await asyncio.gather(*(self.send(request, i, "GET", path, None)
                                         for i in group), return_exceptions=True)
        for i, a in zip(group, answers):
            if isinstance(a, Answer) and a.status == 200:
                return i
        for a in answers:
            if isinstance(a, Answer) and a.status in (401, 403):
                raise Relayed(a)
            if not isinstance(a, Answer) or a.status != 404:
                # a shard that could not say: the task may be there
                raise ApiError("unavailable", f"task {task_id}: not every shard answered",
                               {"task_id": task_id})
        return None

    # -- sending --
    async def send(self, request: web.Request, shard: int, method: str, path_qs: str,
                   body: bytes | None, timeout_s: float | None = None,
                   extra_headers: dict[str, str] | None = None,
                   to_leader: bool = False, local_only: bool = False) -> Answer:
        """`extra_headers`: added to those of `request` that pass to shards. `to_leader`:
        to the shard's leader's replica first; `local_only`: to this node's replica alone
        (Upstreams.send)."""
        headers = {k: request.headers[k] for k in PASS_REQUEST_HEADERS if k in request.headers}
        headers.update(extra_headers or {})
        if body is not None:
            headers["Content-Type"] = "application/json"
        kw = {} if timeout_s is None else {"timeout_s": timeout_s}
        return await self.up.send(shard, method, path_qs, body, headers, to_leader=to_leader,
                                  local_only=local_only, **kw)

    async def relay(self, request: web.Request, shard: int, body: bytes | None = None,
                    path_qs: str | None = None) -> web.Response:
        """Send the request as it is to one shard and answer with that shard's answer."""
        if body is None and request.can_read_body:
            body = await request.read()
        if path_qs is None:
            path_qs = with_min_seq(request, shard)
        a = await self.send(request, shard, request.method, path_qs, body or None)
        return as_response(a)


ROUTER = web.AppKey("router", Router)


class Relayed(Exception):
    """A shard's answer that becomes the router's answer as it is (a 4xx every shard
    would give alike)."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


def as_response(a: Answer) -> web.Response:
    ctype = a.content_type or "application/octet-stream"
    return web.Response(body=a.body, status=a.status, content_type=ctype, headers=a.headers)


def json_response(body: dict, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json",
                        headers=headers)


PREFERENCE_APPLIED = "Preference-Applied"


def applied_preferences(*parts: object) -> dict[str, str]:
    """`Preference-Applied` for an answer joined from others (shards' `Answer`s, or the
    router's own responses; a failed part has no headers): what they applied."""
    for part in parts:
        headers = getattr(part, "headers", None)
        if headers is not None and PREFERENCE_APPLIED in headers:
            return {PREFERENCE_APPLIED: headers[PREFERENCE_APPLIED]}
    return {}


def with_min_seq(request: web.Request, shard: int | None) -> str:
    """The request's path and query, with `min_seq` for `shard` only.

    `min_seq` is either one number (the sequence of the one shard the read goes to) or
    `s:N` pairs separated by commas, one per shard the client has written to; a read of
    one shard takes its pair and drops the others."""
    q = request.query
    raw = q.get("min_seq")
    if raw is None or ":" not in raw:
        return request.path_qs
    seqs = parse_min_seqs(raw)
    params = [(k, v) for k, v in q.items() if k != "min_seq"]
    if shard is not None and seqs.get(shard):
        params.append(("min_seq", str(seqs[shard])))
    return str(request.rel_url.with_query(params))


def parse_min_seqs(raw: str) -> dict[int, int]:
    out = {}
    for item in raw.split(","):
        s, sep, n = item.partition(":")
        if not sep or not s.isdigit() or not n.isdigit() or len(n) > 19:
            raise validate.invalid("min_seq must be a number or shard:seq pairs "
                                   "separated by commas", field="min_seq")
        out[int(s)] = int(n)
    return out


def min_seq_for(request: web.Request, shard: int) -> int | None:
    """`min_seq` for one shard of a read that spans several."""
    raw = request.query.get("min_seq")
    if raw is None:
        return None
    if ":" not in raw:
        return validate.query_int(request.query, "min_seq", 0, 2**63 - 1, 0) or None
    return parse_min_seqs(raw).get(shard)
