"""The router's view of the shard processes: where each shard's replicas answer HTTP, and
one keep-alive pool to send them requests (DESIGN.md section 13).

A request for shard s goes to this node's own replica of s when it has one (loopback, no
network hop), else to the shard's other replicas in placement order. A claim goes to the
replica the shard's leader is on, when the local replicas' status names it (a follower
would only forward it there over HTTP, so every claim was answered twice); a stale name
costs that forward, nothing else. Only a refused
connection moves on to the next replica: a request that may have reached a replica is not
sent twice (the caller's Idempotency-Key makes the client's own retry safe).
"""
from __future__ import annotations

import ssl as ssl_mod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from tsched.node import topology as shards_mod
from tsched.node.config import ClusterConfig
from tsched.node.errors import ApiError

CONNECTIONS_MAX = 4096       # long polls hold one connection each for their wait
UPSTREAM_TIMEOUT_S = 30.0    # a proposal's own limit is 10 s; a claim adds its wait_s
# Headers a client request carries on to a shard process, and back.
PASS_REQUEST_HEADERS = ("Authorization", "Idempotency-Key", "Content-Type", "Accept", "Prefer")
PASS_RESPONSE_HEADERS = ("X-Applied-Seq", shards_mod.SHARD_HEADER, "Retry-After",
                         "Cache-Control", "WWW-Authenticate", "Preference-Applied")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str
    headers: dict

    def json(self) -> Any:   # a shard's JSON answer, whatever it holds; None if not JSON
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None


class Upstreams:
    def __init__(self, cfg: ClusterConfig, node_id: str,
                 ssl: ssl_mod.SSLContext | None = None) -> None:
        self.count = shards_mod.shards_of(cfg)
        self.local = shards_mod.local_shards(cfg, node_id)
        self.urls: list[list[str]] = []
        self.url_of: list[dict[str, str]] = []     # per shard: node id -> its replica's URL
        for s in range(self.count):
            nodes = shards_mod.shard_config(cfg, s).nodes
            mine = [n.url for n in nodes if n.id == node_id]
            self.urls.append(mine + [n.url for n in nodes if n.id != node_id])
            self.url_of.append({n.id: n.url for n in nodes})
        # shard -> the node id its leader is on, as last reported (None: not known)
        self.leader_of: Callable[[int], str | None] = lambda shard: None
        self._ssl = ssl
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=CONNECTIONS_MAX, keepalive_timeout=30,
                                         ssl=self._ssl if self._ssl is not None else True)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def any_shard(self) -> int:
        """A shard for requests any shard answers alike (dashboard, OpenAPI, cron preview)."""
        return self.local[0] if self.local else 0

    def leader_first(self, shard: int) -> str:
        """The URL of the replica on the node the shard's leader was last seen on (or the
        first in placement order when it is not known)."""
        return self._order(shard, True)[0]

    def _order(self, shard: int, to_leader: bool, local_only: bool = False) -> list[str]:
        """`local_only`: this node's own replica alone, when it has one (its readiness)."""
        urls = self.urls[shard]
        if local_only and shard in self.local:
            return urls[:1]
        if not to_leader:
            return urls
        first = self.url_of[shard].get(self.leader_of(shard) or "")
        if first is None or first == urls[0]:
            return urls
        return [first] + [u for u in urls if u != first]

    async def send(self, shard: int, method: str, path_qs: str, body: bytes | None,
                   headers: dict, timeout_s: float = UPSTREAM_TIMEOUT_S,
                   to_leader: bool = False, local_only: bool = False) -> Answer:
        """`to_leader`: first to the replica on the node the shard's leader was last seen
        on (claims: a follower would forward them). `local_only`: this node's replica
        alone (no other replica answers for it)."""
        assert self._session is not None, "Upstreams.start() was not awaited"
        last = None
        for url in self._order(shard, to_leader, local_only):
            try:
                async with self._session.request(
                        method, url + path_qs, data=body, headers=headers,
                        timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                    data = await resp.read()
                    kept = {k: resp.headers[k] for k in PASS_RESPONSE_HEADERS
                            if k in resp.headers}
                    return Answer(resp.status, data, resp.content_type, kept)
            except aiohttp.ClientConnectorError as e:
                last = e       # refused: nothing reached that replica, try the next
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                raise ApiError("unavailable", f"shard {shard} did not answer: "
                               f"{type(e).__name__}", {"shard": shard,
                                                       "outcome": "unknown"}) from None
        raise ApiError("unavailable", f"no replica of shard {shard} is reachable "
                       f"({type(last).__name__})", {"shard": shard})
