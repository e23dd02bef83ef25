"""Helpers for tests of the HTTP API (no tests here): the `Api` test client wrapper and the
error-shape check. The `replica` and `api` fixtures that use them are in tests/conftest.py."""
from __future__ import annotations

import asyncio
import time

from tsched.node.services import Node


class Api:
    """A test client with helpers that return (status, json)."""

    def __init__(self, client, node: Node) -> None:
        self.client, self.node = client, node

    async def call(self, method: str, path: str, body=None, *, raw: bytes | None = None,
                   headers: dict | None = None):
        kwargs = {"headers": headers or {}}
        if raw is not None:
            kwargs["data"] = raw
        elif body is not None:
            kwargs["json"] = body
        resp = await self.client.request(method, path, **kwargs)
        return resp.status, await resp.json(content_type=None)

    async def submit(self, **fields):
        fields.setdefault("task_type", "t")
        status, body = await self.call("POST", "/v1/tasks", fields)
        assert status == 201, body
        return body

    async def claim(self, task_types=("t",), **fields):
        body = {"worker_id": "w1", "task_types": list(task_types), "max_tasks": 1,
                "wait_s": 0, **fields}
        status, out = await self.call("POST", "/v1/claims", body)
        assert status == 200, out
        return out["tasks"]


def assert_error(status: int, body, want_status: int, code: str) -> None:
    assert status == want_status, body
    assert set(body) >= {"error"}, body
    err = body["error"]
    assert err["code"] == code, body
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["details"], dict)


async def until(check, what: str, timeout_s: float = 10.0) -> None:
    """Poll `check()` on the loop until it is true; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
