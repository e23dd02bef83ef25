"""Follower -> leader HTTP forwarding over one keep-alive connection pool."""
from __future__ import annotations

import ssl as ssl_mod

import aiohttp

from tsched.node.errors import ApiError

FORWARDED_HEADER = "X-Tsched-Forwarded"
CONNECTIONS_MAX = 4096   # each forwarded long poll holds one connection for its wait


class Forwarder:
    def __init__(self, node_id: str, ssl: ssl_mod.SSLContext | None = None) -> None:
        self.node_id = node_id
        self._ssl = ssl     # verifies peers' HTTPS certificates (tls.cluster_client_context)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=CONNECTIONS_MAX, keepalive_timeout=30,
                                         ssl=self._ssl if self._ssl is not None else True)
        self._session = aiohttp.ClientSession(connector=connector)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, base_url: str, method: str, path_qs: str, body: bytes | None, *,
                   timeout_s: float, headers: dict | None = None) -> tuple[int, bytes]:
        """(status, raw JSON body) from the node at base_url; ApiError('unavailable') if it
        cannot be reached in time."""
        assert self._session is not None, "Forwarder.start() was not awaited"
        hdrs = {FORWARDED_HEADER: self.node_id, "Content-Type": "application/json"}
        hdrs.update(headers or {})
        try:
            async with self._session.request(
                    method, base_url + path_qs, data=body, headers=hdrs,
                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ApiError("unavailable", f"the leader at {base_url} did not answer: "
                           f"{type(e).__name__}", {"leader_url": base_url}) from None

    async def get_json(self, url: str, timeout_s: float,
                       headers: dict[str, str] | None = None) -> object:
        """GET url -> parsed JSON, or None if it cannot be had in time."""
        assert self._session is not None
        try:
            async with self._session.get(
                    url, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status != 200:
                    return None
                return await resp.json()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None
