"""Reads that span the shards: merged listings with a cursor per shard, summed stats,
the cluster with every shard, and metrics with a `shard` label (DESIGN.md section 13)."""
from __future__ import annotations

import asyncio
import base64
import binascii
import heapq
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

import orjson
from aiohttp import web

from tsched.node.api import validate
from tsched.node.shards.router import ROUTER, Relayed, Router, json_response, min_seq_for
from tsched.statemachine import tiers

routes = web.RouteTableDef()

CURSOR_CHARS_MAX = 8192
CURSOR_PREFIX = "m1."
# A listing item (a shard's JSON object) -> its place in the merged order.
SortKey = Callable[[dict], tuple[str | int | float, ...]]


async def gather(r: Router, request: web.Request, paths: dict[int, str]) -> dict[int, dict]:
    """GET each shard's path; its parsed answer by shard. A shard's 4xx is the answer."""
    shards = list(paths)
    answers = await asyncio.gather(*(r.send(request, s, "GET", paths[s], None)
                                     for s in shards))
    out = {}
    for s, a in zip(shards, answers):
        if a.status != 200:
            raise Relayed(a)
        out[s] = a.json()
    return out


def _query(request: web.Request, shard: int, drop: tuple[str, ...] = (), **extra: object) -> str:
    params = [(k, v) for k, v in request.query.items() if k not in ("min_seq",) + drop]
    seq = min_seq_for(request, shard)
    if seq:
        params.append(("min_seq", str(seq)))
    params += [(k, str(v)) for k, v in extra.items() if v is not None]
    return "?" + urlencode(params) if params else ""


def _seqs(docs: dict[int, dict]) -> dict[str, int]:
    return {str(s): d["applied_seq"] for s, d in docs.items()
            if isinstance(d, dict) and "applied_seq" in d}


# --- listings --------------------------------------------------------------------------------

def _encode_cursor(state: list) -> str:
    raw = orjson.dumps(state)
    return CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(text: str | None, count: int) -> list:
    """Per shard: None when it has no more, else [its own cursor or None, items skipped]."""
    if text is None:
        return [[None, 0] for _ in range(count)]
    try:
        if not text.startswith(CURSOR_PREFIX) or len(text) > CURSOR_CHARS_MAX:
            raise ValueError("not a cursor of this listing")
        body = text[len(CURSOR_PREFIX):]
        state = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        if not isinstance(state, list) or len(state) != count:
            raise ValueError("made for another shard count")
        for item in state:
            if item is not None and not (isinstance(item, list) and len(item) == 2
                                         and (item[0] is None or isinstance(item[0], str))
                                         and isinstance(item[1], int) and item[1] >= 0):
                raise ValueError("malformed")
        return state
    except (ValueError, binascii.Error, orjson.JSONDecodeError) as e:
        raise validate.invalid(f"bad cursor: {e}", field="cursor") from None


async def merged_listing(request: web.Request, path: str, key: str, sort_key: SortKey,
                         newest_first: bool) -> web.Response:
    """One page merged from every shard's pages, in the listing's order.

    Each shard is asked for the items after its position (its own cursor, then a number of
    items already shown); the page takes the head of the merge while every shard that has
    more still has items in hand, so no item is shown out of order or skipped."""
    r: Router = request.app[ROUTER]
    limit = validate.query_int(request.query, "limit", 1, validate.LIST_LIMIT_MAX, 100)
    assert limit is not None, "query_int gives its default (100) when the query has none"
    state = _decode_cursor(request.query.get("cursor"), r.count)
    live = [s for s in range(r.count) if state[s] is not None]
    paths = {s: path + _query(request, s, ("cursor", "limit"), cursor=state[s][0],
                              limit=min(validate.LIST_LIMIT_MAX, state[s][1] + limit))
             for s in live}
    docs = await gather(r, request, paths)
    heads, at = {}, {}
    for s in live:
        items = (docs[s].get(key) or [])[state[s][1]:]
        heads[s] = (items, docs[s].get("next_cursor"))
        at[s] = _item_cursors(docs[s], key)
    sign = -1 if newest_first else 1
    heap = [(_order(sort_key(items[0]), sign), s, 0) for s, (items, _) in heads.items() if items]
    heapq.heapify(heap)
    page: list = []
    used = {s: 0 for s in live}
    # A shard that sent nothing yet has more (a bounded scan, GET /v1/audit) may hold
    # entries before any other's: nothing goes on this page past it, its cursor moves on.
    blocked = any(not items and more is not None for items, more in heads.values())
    while heap and len(page) < limit and not blocked:
        _, s, i = heapq.heappop(heap)
        items, more = heads[s]
        page.append(items[i])
        used[s] = i + 1
        if i + 1 < len(items):
            heapq.heappush(heap, (_order(sort_key(items[i + 1]), sign), s, i + 1))
        elif more is not None:
            break      # this shard has more than it sent: the merge cannot go past it
    nxt: list[list | None] = []
    for s in range(r.count):
        if state[s] is None:
            nxt.append(None)
            continue
        items, more = heads[s]
        pins = at[s]
        if used[s] == len(items):
            nxt.append(None if more is None else [more, 0])
        elif pins is not None:   # pinned at the first item not shown
            nxt.append([pins[state[s][1] + used[s]], 0])
        else:
            nxt.append([state[s][0], state[s][1] + used[s]])
    done = all(x is None for x in nxt)
    return json_response({key: page, "next_cursor": None if done else _encode_cursor(nxt),
                          "applied_seqs": _seqs(docs)})


def _item_cursors(doc: dict, key: str) -> list[str] | None:
    """A shard's `item_cursors` (GET /v1/tasks: for each item, a cursor whose page starts at
    it), when it names one per item. A place kept as such a cursor stays put while new
    items arrive above it, where one kept as a count of items skipped from the shard's top
    would shift (and show an item twice); listings without them keep the count."""
    cursors = doc.get("item_cursors")
    items = doc.get(key) or []
    if (isinstance(cursors, list) and len(cursors) == len(items)
            and all(isinstance(c, str) for c in cursors)):
        return cursors
    return None


def _order(key: tuple[str | int | float, ...], sign: int) -> tuple[object, ...]:
    return tuple(sign * k if isinstance(k, (int, float)) else _Desc(k) if sign < 0 else k
                 for k in key)


class _Desc:
    """A string key sorted backwards (newest first on equal times)."""

    __slots__ = ("v",)

    def __init__(self, v: str) -> None:
        self.v = v

    def __lt__(self, other: "_Desc") -> bool:
        return self.v > other.v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v


def _single_tenant(r: Router, request: web.Request) -> str | None:
    return request.query.get("tenant") or r.scope(request)


def _listing(path: str, key: str, sort_key: SortKey,
             newest_first: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
    """One tenant's listing goes to its shard as it is; any other merges the shards."""
    async def handler(request: web.Request) -> web.Response:
        r: Router = request.app[ROUTER]
        tenant = _single_tenant(r, request)
        if tenant is not None:
            return await r.relay(request, r.tenant_shard(tenant))
        return await merged_listing(request, path, key, sort_key, newest_first)
    return handler


routes.get("/v1/tasks")(_listing("/v1/tasks", "tasks",
                                 lambda t: (t.get("created_at") or "",), newest_first=True))


@routes.get("/v1/audit")
async def audit(request: web.Request) -> web.Response:
    """Every shard's trail, merged newest first by time (then id, then shard)."""
    return await merged_listing(request, "/v1/audit", "entries",
                                lambda e: (e.get("at") or "", e.get("id") or 0),
                                newest_first=True)


routes.get("/v1/workflows")(_listing("/v1/workflows", "workflows",
                                     lambda w: (w.get("created_at") or "",), newest_first=True))


routes.get("/v1/schedules")(_listing(
    "/v1/schedules", "schedules",
    lambda s: (s.get("tenant") or "", s.get("schedule_id") or ""), newest_first=False))


@routes.get("/v1/tenants")
async def list_tenants(request: web.Request) -> web.Response:
    r: Router = request.app[ROUTER]
    docs = await gather(r, request, {s: "/v1/tenants" + _query(request, s)
                                      for s in range(r.count)})
    views = sorted((v for d in docs.values() for v in d.get("tenants") or ()),
                   key=lambda v: v.get("tenant") or "")
    return json_response({"tenants": views, "applied_seqs": _seqs(docs)})


# --- sums ------------------------------------------------------------------------------------

@routes.get("/v1/stats")
async def stats(request: web.Request) -> web.Response:
    r: Router = request.app[ROUTER]
    tenant = _single_tenant(r, request)
    if tenant is not None:
        return await r.relay(request, r.tenant_shard(tenant))
    docs = await gather(r, request, {s: "/v1/stats" + _query(request, s)
                                      for s in range(r.count)})
    return json_response(sum_stats(docs))


def sum_stats(docs: dict[int, dict]) -> dict:
    out: dict = {"by_state": {}, "by_priority": {}, "by_tenant": {},
                 "oldest_claimable_age_s": None, "waiting_claims": 0, "schedules": None,
                 "by_shard": {}}
    for s, d in sorted(docs.items()):
        _add(out["by_state"], d.get("by_state") or {})
        _add(out["by_priority"], d.get("by_priority") or {})
        out["by_tenant"].update(d.get("by_tenant") or {})    # a tenant lives in one shard
        age = d.get("oldest_claimable_age_s")
        if age is not None:
            out["oldest_claimable_age_s"] = max(age, out["oldest_claimable_age_s"] or 0)
        out["waiting_claims"] += d.get("waiting_claims") or 0
        out["schedules"] = _sum_nested(out["schedules"], d.get("schedules"))
        out["by_shard"][str(s)] = d.get("by_state") or {}
    out["applied_seqs"] = _seqs(docs)
    return out


def _add(into: dict, more: dict) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v if isinstance(v, (int, float)) else v


def _sum_nested(a: object, b: object) -> object:
    if a is None:
        return b
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _sum_nested(a.get(k), b.get(k)) for k in {**a, **b}}
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a + b
    return a if b is None else b


@routes.get("/v1/timeseries")
async def timeseries(request: web.Request) -> web.Response:
    """The graphs' points summed over every shard (DESIGN 14.5)."""
    r: Router = request.app[ROUTER]
    docs = await gather(r, request, {s: "/v1/timeseries" + _query(request, s)
                                      for s in range(r.count)})
    return json_response(sum_timeseries(list(docs.values())))


def sum_timeseries(docs: list[dict]) -> dict:
    """Counts and queue depths add up point by point (aligned by time: every shard's points
    start at a multiple of the step); a lateness percentile cannot be added, so the merged
    one is the highest of the shards' (an upper bound), per tier as well."""
    step = docs[0]["step_s"]
    starts = [d["start"] for d in docs if d.get("start") is not None]
    out = {"step_s": step, "points_max": docs[0]["points_max"],
           "start": min(starts) if starts else None}
    columns = [k for k, v in docs[0].items() if isinstance(v, list)]
    length = max((len(d[columns[0]]) + (d["start"] - out["start"]) // step
                  for d in docs if d.get("start") is not None), default=0)
    placed = [(d, (d["start"] - out["start"]) // step) for d in docs
              if d.get("start") is not None]
    for name in columns:
        out[name] = _merge_column([(d[name], at) for d, at in placed], length,
                                  name.startswith("lateness_"), name == "queue_depth")
    for name, value in docs[0].items():
        if isinstance(value, dict):        # lateness_p99_ms_by_tier: {tier: column}
            out[name] = {tier: _merge_column([(d.get(name, {}).get(tier, []), at)
                                              for d, at in placed], length, True, False)
                         for tier in value}
    return out


def _merge_column(columns: list[tuple[list, int]], length: int, highest: bool,
                  gauge: bool) -> list:
    """Columns placed at their offsets, added (or the highest taken) where several have a
    value; a gauge's or a percentile's point without any value is null, a count's 0."""
    merged: list = [None if gauge or highest else 0] * length
    for column, offset in columns:
        for i, v in enumerate(column):
            if v is not None:
                old = merged[offset + i]
                merged[offset + i] = v if old is None else (max(old, v) if highest
                                                            else old + v)
    return merged


# --- the cluster -----------------------------------------------------------------------------

@routes.get("/v1/cluster")
async def cluster(request: web.Request) -> web.Response:
    r: Router = request.app[ROUTER]
    validate.query(request.query, ())
    answers = await asyncio.gather(*(r.send(request, s, "GET", "/v1/cluster", None)
                                     for s in range(r.count)), return_exceptions=True)
    public = {n.id: n.http for n in r.cfg.nodes}
    shards: list[dict] = []
    for s, a in enumerate(answers):
        if isinstance(a, BaseException) or a.status != 200:
            if not isinstance(a, BaseException) and 400 <= a.status < 500:
                raise Relayed(a)
            shards.append({"shard": s, "leader": None, "term": None, "nodes": []})
            continue
        doc = a.json()
        nodes = [dict(n, http=public.get(n["id"], n.get("http"))) for n in doc["nodes"]]
        shards.append({"shard": s, "leader": doc["leader"], "term": doc["term"],
                       "nodes": nodes})
    first = shards[0]
    return json_response({"leader": first["leader"], "term": first["term"],
                          "nodes": first["nodes"], "shards": shards,
                          "tiers": tiers.to_json(r.cfg.tiers)})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """This node's shard processes' metrics, each sample labelled with its shard."""
    r: Router = request.app[ROUTER]
    local = r.up.local or [0]
    answers = await asyncio.gather(*(r.send(request, s, "GET", request.path_qs, None)
                                     for s in local))
    for a in answers:
        if a.status != 200:
            raise Relayed(a)
    text = merge_metrics({s: a.body.decode() for s, a in zip(local, answers)})
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


def merge_metrics(texts: dict[int, str]) -> str:
    """Prometheus text from several shards as one exposition: each family's comments once,
    then every shard's samples with `shard="s"` as their first label."""
    families: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for s, text in sorted(texts.items()):
        family = ""
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    head = families.setdefault(family, [])
                    if len(head) < 2 and line not in head:
                        head.append(line)
                continue
            families.setdefault(family, [])
            samples.setdefault(family, []).append(_label(line, s))
    out = []
    for family, head in families.items():
        out += head
        out += samples.get(family, [])
    return "\n".join(out) + "\n"


def _label(line: str, shard: int) -> str:
    name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
    name, rest = line[:name_end], line[name_end:]
    if rest.startswith("{}"):
        rest = rest[2:]
    if rest.startswith("{"):
        return f'{name}{{shard="{shard}",{rest[1:]}'
    return f'{name}{{shard="{shard}"}}{rest}'
