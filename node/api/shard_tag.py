"""A shard process's answers name their shard (DESIGN.md section 13)."""
from __future__ import annotations

from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Handler

from tsched.node.topology import SHARD_HEADER


class TagMiddleware(Protocol):
    """An `@web.middleware` coroutine function."""

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse: ...


def shard_tag_middleware(shard: int) -> TagMiddleware:
    """Every JSON object a shard process answers gains `"shard": s` (and a header), so a
    client keeps its read-your-writes sequence per shard. Spliced into the bytes: the body
    is not parsed again."""
    head = b'{"shard":%d,' % shard
    empty = b'{"shard":%d}' % shard

    @web.middleware
    async def tag(request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        if isinstance(resp, web.Response) and resp.content_type == "application/json":
            body = resp.body
            if isinstance(body, bytes) and body[:1] == b"{":
                resp.body = empty if body == b"{}" else head + body[1:]
            resp.headers[SHARD_HEADER] = str(shard)
        return resp
    return tag
