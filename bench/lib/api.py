"""A lean asyncio HTTP client for load generation (aiohttp + orjson, keep-alive pools).

The benchmarks drive the node's batch endpoints directly so that the client process costs
as little CPU as possible on a small machine; the figures then describe the cluster.
"""
from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson


class HttpError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        code = body.get("error", {}).get("code") if isinstance(body, dict) else None
        super().__init__(f"HTTP {status} {code or body!r}"[:300])
        self.status, self.body, self.code = status, body, code


JSON = {"Content-Type": "application/json"}
MINIMAL = {**JSON, "Prefer": "return=minimal"}


class Api:
    """One keep-alive session for all nodes; every call takes the node's base URL."""

    def __init__(self, connections: int = 256, timeout_s: float = 30.0) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            json_serialize=lambda o: orjson.dumps(o).decode())
        self.timeout_s = timeout_s

    async def close(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> "Api":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def call(self, method: str, url: str, body: Any = None,
                   timeout_s: float | None = None, minimal: bool = False) -> Any:
        """`minimal`: ask for minimal answers (`Prefer: return=minimal`)."""
        data = orjson.dumps(body) if body is not None else None
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else None
        async with self.session.request(method, url, data=data, timeout=timeout,
                                        headers=MINIMAL if minimal else JSON) as r:
            raw = await r.read()
            parsed = orjson.loads(raw) if raw else None
            if r.status >= 300:
                raise HttpError(r.status, parsed)
            return parsed

    async def submit(self, base: str, tasks: list[dict], timeout_s: float | None = None,
                     minimal: bool = False) -> list[dict]:
        """Batch submit; returns the created tasks in order."""
        body = await self.call("POST", base + "/v1/tasks", {"tasks": tasks}, timeout_s, minimal)
        return body["tasks"]

    async def submit_one(self, base: str, task: dict, timeout_s: float | None = None) -> dict:
        return await self.call("POST", base + "/v1/tasks", task, timeout_s)

    async def claim(self, base: str, worker_id: str, task_types: list[str], max_tasks: int,
                    wait_s: float, lease_s: float = 60, prefetch_ms: int = 0,
                    timeout_s: float | None = None, minimal: bool = False) -> list[dict]:
        """`minimal`: each task as a worker needs it (`Prefer: return=minimal`)."""
        body = {"worker_id": worker_id, "task_types": task_types, "max_tasks": max_tasks,
                "wait_s": wait_s, "lease_s": lease_s}
        if prefetch_ms:
            body["prefetch_ms"] = prefetch_ms
        res = await self.call("POST", base + "/v1/claims", body, timeout_s or wait_s + 15,
                              minimal)
        return res["tasks"]

    async def claim_and_complete(self, base: str, worker_id: str, task_types: list[str],
                                 max_tasks: int, wait_s: float, done: list[dict],
                                 result: Any = None, lease_s: float = 60,
                                 timeout_s: float | None = None, minimal: bool = False
                                 ) -> tuple[list[dict], list[dict]]:
        """A claim that carries the completions of `done` (claimed tasks): (the tasks it
        got, one result per completion)."""
        body = {"worker_id": worker_id, "task_types": task_types, "max_tasks": max_tasks,
                "wait_s": wait_s, "lease_s": lease_s, "completions": _completions(done, result)}
        res = await self.call("POST", base + "/v1/claims", body, timeout_s or wait_s + 15,
                              minimal)
        return res["tasks"], res["completions"]

    async def complete_many(self, base: str, tasks: list[dict], result: Any = None,
                            timeout_s: float | None = None, minimal: bool = False
                            ) -> list[dict]:
        """Batch completion of claimed tasks (each needs task_id and fencing_token)."""
        res = await self.call("POST", base + "/v1/completions",
                              {"completions": _completions(tasks, result)}, timeout_s, minimal)
        return res["results"]

    async def all_tasks(self, base: str, query: str, timeout_s: float = 30.0) -> list[dict]:
        """Every task `GET /v1/tasks?<query>` lists, following `next_cursor` to the end (a
        page may stop early at the node's scan bound, with no task and a cursor)."""
        out: list[dict] = []
        cursor = None
        while True:
            q = query + (f"&cursor={cursor}" if cursor else "")
            body = await self.call("GET", f"{base}/v1/tasks?{q}", timeout_s=timeout_s)
            out += body["tasks"]
            cursor = body.get("next_cursor")
            if not cursor:
                return out

    async def cluster(self, base: str, timeout_s: float = 2.0) -> dict:
        return await self.call("GET", base + "/v1/cluster", timeout_s=timeout_s)


def _completions(tasks: list[dict], result: Any) -> list[dict]:
    return [{"task_id": t["task_id"], "fencing_token": t["fencing_token"], "result": result}
            for t in tasks]


def install_fast_loop() -> str:
    """uvloop when installed (DESIGN.md allows it); returns the loop's name for the header."""
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return "uvloop"
    except ImportError:
        return "asyncio"
