"""The router's paused-queue routes (node/shards/pause_routes.py): a pause reaches every
shard or is refused before any shard is written; a write cut short names both sides; the
listing merges shards and names a pause's missing shards. The shards are stand-ins that
answer as a shard's replica would (the real path is tests/integration/test_shards_cluster.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

from aiohttp import web

from tsched.node.errors import ApiError
from tsched.node.shards import pause_routes
from tsched.node.shards.router import ROUTER
from tsched.node.shards.router_app import error_middleware
from tsched.node.shards.upstream import Answer

PAUSE = {"task_type": "charge", "tenant": None, "paused_at": "2026-12-06T10:00:00.000Z",
         "actor": "admin", "reason": None}


def _answer(status: int, body: dict) -> Answer:
    return Answer(status, json.dumps(body).encode(), "application/json", {})


class Shards:
    """`count` shards; `down`: shards whose leader cannot commit (no answer at all);
    `fail_writes`: shards that pass the probe but fail the write; `paused`: per shard,
    whether it holds the pause."""

    def __init__(self, count: int, down=(), fail_writes=(), paused=None) -> None:
        self.count, self.down, self.fail_writes = count, set(down), set(fail_writes)
        self.paused = paused if paused is not None else {s: False for s in range(count)}
        self.writes: list[int] = []
        self.lagging: set[int] = set()   # replicas the router reads first, behind their leader

    async def send(self, request, shard, method, path_qs, body, **kw) -> Answer:
        if shard in self.down:
            raise ApiError("unavailable", f"shard {shard} did not answer", {"shard": shard})
        if method == "GET":
            fresh = "consistency=linearizable" in path_qs or shard not in self.lagging
            return _answer(200, {"pauses": [PAUSE] if self.paused[shard] and fresh else [],
                                 "applied_seq": 7})
        if shard in self.fail_writes:
            return _answer(503, {"error": {"code": "no_leader", "message": "no leader"}})
        self.writes.append(shard)
        if path_qs.endswith("/resume"):
            was, self.paused[shard] = self.paused[shard], False
            if not was:
                return _answer(404, {"error": {"code": "not_found", "message": "no pause"}})
            return _answer(200, {**PAUSE, "changed": True, "resumed_at": PAUSE["paused_at"]})
        was, self.paused[shard] = self.paused[shard], True
        return _answer(200, {**PAUSE, "changed": not was, "shard": shard, "applied_seq": 1})


async def _client(aiohttp_client, shards: Shards):
    app = web.Application(middlewares=[error_middleware])
    app[ROUTER] = SimpleNamespace(up=SimpleNamespace(count=shards.count), send=shards.send)
    app.router.add_routes(pause_routes.routes)
    return await aiohttp_client(app)


async def test_a_pause_reaches_every_shard(aiohttp_client):
    shards = Shards(3, paused={0: True, 1: False, 2: False})
    client = await _client(aiohttp_client, shards)
    r = await client.post("/v1/queues/pause", json={"task_type": "charge"})
    body = await r.json()
    assert r.status == 200 and body["changed"] is True and "shard" not in body
    assert sorted(shards.writes) == [0, 1, 2] and all(shards.paused.values())


async def test_a_shard_that_cannot_commit_refuses_it_untouched(aiohttp_client):
    shards = Shards(3, down=[1])
    client = await _client(aiohttp_client, shards)
    r = await client.post("/v1/queues/pause", json={"task_type": "charge"})
    body = await r.json()
    assert r.status == 503 and body["error"]["code"] == "unavailable"
    assert body["error"]["details"]["shards"] == [1]
    assert "nothing was changed" in body["error"]["message"]
    assert shards.writes == [] and not any(shards.paused.values())


async def test_a_write_cut_short_names_both_sides_and_a_repeat_finishes_it(aiohttp_client):
    shards = Shards(3, fail_writes=[2])
    client = await _client(aiohttp_client, shards)
    r = await client.post("/v1/queues/pause", json={"task_type": "charge"})
    body = await r.json()
    assert r.status == 503 and body["error"]["details"] == {"applied_shards": [0, 1],
                                                            "failed_shards": [2]}
    r = await client.get("/v1/queues")
    assert (await r.json())["pauses"] == [{**PAUSE, "missing_shards": [2]}]
    shards.fail_writes.clear()
    r = await client.post("/v1/queues/pause", json={"task_type": "charge"})
    assert r.status == 200 and (await r.json())["changed"] is True
    r = await client.get("/v1/queues")
    assert (await r.json())["pauses"] == [PAUSE]


async def test_a_resume_where_some_shards_lack_the_pause_and_where_none_has_it(aiohttp_client):
    shards = Shards(2, paused={0: True, 1: False})
    client = await _client(aiohttp_client, shards)
    r = await client.post("/v1/queues/resume", json={"task_type": "charge"})
    assert r.status == 200 and (await r.json())["resumed_at"]
    r = await client.post("/v1/queues/resume", json={"task_type": "charge"})
    assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"


async def test_a_bad_body_is_400_before_any_shard_is_asked(aiohttp_client):
    shards = Shards(2, down=[0, 1])
    client = await _client(aiohttp_client, shards)
    for body in ({}, {"tenant": "a b"}, {"task_type": "x", "extra": 1}):
        r = await client.post("/v1/queues/pause", json=body)
        assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_argument"
    r = await client.post("/v1/queues/resume", data=b"not json")
    assert r.status == 400


async def test_a_lagging_replica_is_read_again_from_its_leader(aiohttp_client):
    shards = Shards(2, paused={0: True, 1: True})
    shards.lagging = {1}
    client = await _client(aiohttp_client, shards)
    r = await client.get("/v1/queues")
    body = await r.json()
    assert body["pauses"] == [PAUSE] and body["applied_seqs"] == {"0": 7, "1": 7}
