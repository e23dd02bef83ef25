"""The router's paused-queue routes (issue 48; docs/DESIGN.md 15.1).

A pause by task type covers tenants of every shard, so every shard holds every pause, as
every shard holds every keyed limit (limit_routes.py). A pause or resume must reach every
shard, or be refused clearly:

1. before anything is written, every shard must commit a barrier (a linearizable read of
   its `/v1/queues`): a shard without a leader refuses the whole request with 503
   `unavailable` naming it, and nothing is paused anywhere;
2. then the write goes to every shard at once. Should a shard fail in between (its leader
   lost in that instant), the answer is 503 `unavailable` naming the shards that took it
   and those that did not: repeating the request finishes it (a pause of a paused
   selector, or a resume of a lifted one on the shards that did, changes nothing), and
   `GET /v1/queues` names a pause's `missing_shards` meanwhile.

The body is checked here first, so a bad one is a 400 before any shard is asked.
"""
from __future__ import annotations

import asyncio

from aiohttp import web

from tsched.node.api.queues import pause_body, resume_body
from tsched.node.errors import ApiError
from tsched.node.shards.keyed_routes import loads
from tsched.node.shards.merge import gather
from tsched.node.shards.router import (ROUTER, Relayed, Router, as_response, json_response,
                                      with_min_seq)
from tsched.node.shards.upstream import Answer

routes = web.RouteTableDef()
PROBE = "/v1/queues?consistency=linearizable"


@routes.post("/v1/queues/pause")
async def pause(request: web.Request) -> web.Response:
    raw = await request.read()
    pause_body(loads(raw))
    return await _everywhere(request, raw, ok=(200,))


@routes.post("/v1/queues/resume")
async def resume(request: web.Request) -> web.Response:
    raw = await request.read()
    resume_body(loads(raw))
    return await _everywhere(request, raw, ok=(200, 404))   # 404: lifted there already


async def _everywhere(request: web.Request, raw: bytes, ok: tuple[int, ...]) -> web.Response:
    r = request.app[ROUTER]
    shards = list(range(r.up.count))
    await _all_can_commit(request, r, shards)
    sent = await asyncio.gather(*(r.send(request, s, "POST", request.path_qs, raw)
                                  for s in shards), return_exceptions=True)
    took = [s for s, a in zip(shards, sent) if isinstance(a, Answer) and a.status in ok]
    if len(took) < len(shards):
        raise _partial(shards, sent, took)
    answers = [a for a in sent if isinstance(a, Answer)]
    applied = [a for a in answers if a.status == 200]
    if not applied:                    # a resume of what no shard has paused
        return as_response(answers[0])
    docs = {s: a.json() for s, a in zip(shards, sent) if isinstance(a, Answer)}
    out = applied[0].json()
    out["changed"] = any(a.json().get("changed") for a in applied)
    out.pop("shard", None)
    out.pop("applied_seq", None)
    out["applied_seqs"] = _seqs(docs)    # read-your-writes on every shard
    return json_response(out)


async def _all_can_commit(request: web.Request, r: Router, shards: list[int]) -> None:
    """Every shard's leader commits a barrier now, or the request is refused untouched."""
    probes = await asyncio.gather(*(r.send(request, s, "GET", PROBE, None) for s in shards),
                                  return_exceptions=True)
    down = []
    for s, a in zip(shards, probes):
        if isinstance(a, Answer) and a.status in (401, 403):
            raise Relayed(a)
        if not isinstance(a, Answer) or a.status != 200:
            down.append(s)
    if down:
        raise ApiError("unavailable", f"shard(s) {', '.join(map(str, down))} cannot commit "
                       "now (no leader?); nothing was changed on any shard: try again",
                       {"shards": down})


def _partial(shards: list[int], sent: list, took: list[int]) -> Exception:
    """The first refusal as it is when no shard took the write; else a 503 naming both
    sides (repeat the request to finish it)."""
    failed = [s for s in shards if s not in took]
    first = sent[failed[0]]
    if not took:
        return Relayed(first) if isinstance(first, Answer) else first
    why = (f"status {first.status}" if isinstance(first, Answer) else str(first))
    return ApiError("unavailable", f"applied on shard(s) {', '.join(map(str, took))} but not "
                    f"on {', '.join(map(str, failed))} ({why}): repeat the request to finish",
                    {"applied_shards": took, "failed_shards": failed})


@routes.get("/v1/queues")
async def list_queues(request: web.Request) -> web.Response:
    """Every shard's pauses, merged by selector (the earliest `paused_at`); a pause some
    shard lacks (a write cut short) names its `missing_shards`. A replica may not have
    applied a pause its leader has: a shard that seems to lack one is read again from its
    leader (linearizable) before it is named."""
    r = request.app[ROUTER]
    shards = range(r.up.count)
    docs = await gather(r, request, {s: with_min_seq(request, s) for s in shards})
    out = _merged(docs)
    lagging = sorted({s for p in out for s in p.get("missing_shards", ())})
    if lagging:
        docs.update(await gather(r, request, {s: PROBE for s in lagging}))
        out = _merged(docs)
    return json_response({"pauses": out, "applied_seqs": _seqs(docs)})


def _merged(docs: dict[int, dict]) -> list[dict]:
    by_key: dict[tuple[str, str], dict] = {}
    holders: dict[tuple[str, str], list[int]] = {}
    for s in sorted(docs):
        for p in docs[s].get("pauses", []):
            key = (p.get("task_type") or "", p.get("tenant") or "")
            have = by_key.get(key)
            if have is None or (p.get("paused_at") or "") < (have.get("paused_at") or ""):
                by_key[key] = p
            holders.setdefault(key, []).append(s)
    out = []
    for key in sorted(by_key):
        item = dict(by_key[key])
        missing = [s for s in sorted(docs) if s not in holders[key]]
        if missing:
            item["missing_shards"] = missing
        out.append(item)
    return out


def _seqs(docs: dict[int, dict]) -> dict[str, int]:
    return {str(s): d["applied_seq"] for s, d in docs.items()
            if isinstance(d, dict) and isinstance(d.get("applied_seq"), int)}
