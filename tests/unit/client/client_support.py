"""A tiny programmable HTTP node for client, worker and CLI unit tests (no tests here).

`FakeNode` runs an aiohttp app on a free loopback port in a background thread. Routes are
plain functions `fn(req) -> (status, body)` (or coroutines), where `req` is a `Seen` record;
every request is recorded in `node.seen`.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    raw_path: str = ""   # as sent, before percent-decoding


class FakeNode:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Callable] = {}
        self.seen: list[Seen] = []
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("fake node did not start")

    def route(self, method: str, path: str, fn: Callable) -> None:
        self.routes[(method, path)] = fn

    def json(self, method: str, path: str, status: int, body: Any) -> None:
        self.route(method, path, lambda req: (status, body))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        seen = Seen(request.method, request.path, dict(request.query), dict(request.headers), body,
                    request.raw_path.split("?")[0])
        self.seen.append(seen)
        fn = self.routes.get((request.method, request.path))
        if fn is None:
            return web.json_response({"error": {"code": "not_found", "message": "no route",
                                                 "details": {}}}, status=404)
        out = fn(seen)
        if inspect.isawaitable(out):
            out = await out
        status, payload, *extra = out        # (status, body[, headers])
        headers = extra[0] if extra else None
        if isinstance(payload, str):
            return web.Response(text=payload, status=status, headers=headers)
        return web.json_response(payload, status=status, headers=headers)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def dead_url() -> str:
    """A loopback URL where nothing listens (a port the OS just gave us, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def error(code: str, message: str = "", status: int = 400) -> tuple[int, dict]:
    return status, {"error": {"code": code, "message": message, "details": {"why": code}}}
