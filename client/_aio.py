"""The transport under `AsyncClient` (and so under `Worker`): aiohttp.

Why not httpx's async client, like the sync `Client`: it cost several times aiohttp's CPU per
request (`python -m bench.client_cpu`, bench/notes/2026-11-30-prefetch-lateness.md), and a Worker makes a
request for every claim, heartbeat batch and completion batch. The answer is read whole
into `Response`, which has the few attributes `_core` reads (status_code, headers,
content, text), so both clients share the same answer handling.
"""
from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp

CONNECTIONS_MAX = 100
# What a failed attempt raises: the next node (or a later round) is tried.
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


class Response:
    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers          # case-insensitive, like httpx's
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def query(params: dict[str, Any]) -> list[tuple[str, str]]:
    """Query items encoded as httpx encodes them (booleans as true/false, lists repeated)."""
    out = []
    for key, value in params.items():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            out.append((key, ("true" if v else "false") if isinstance(v, bool) else str(v)))
    return out


class AioTransport:
    """One keep-alive connection pool, made on first use (it needs the running loop)."""

    def __init__(self, verify: ssl.SSLContext | bool) -> None:
        self._verify = verify
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=CONNECTIONS_MAX, ssl=self._verify)
            self._session = aiohttp.ClientSession(connector=connector,
                                                  cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def request(self, method: str, url: str, headers: dict[str, str],
                      params: dict[str, Any], read_s: float, connect_s: float,
                      content: str | None = None) -> Response:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=read_s, sock_connect=connect_s)
        async with self._open().request(method, url, headers=headers, params=query(params),
                                        data=content, timeout=timeout) as resp:
            return Response(resp.status, resp.headers, await resp.read())

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
