"""`Client` (sync, over httpx) and `AsyncClient` (over aiohttp, see `_aio`): the API calls of
`_api`, with node rotation, backoff, a total deadline, idempotency keys on writes and
`min_seq` on reads."""
from __future__ import annotations

import asyncio
import contextvars
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable, Iterable, Iterator

import httpx

from tsched.statemachine.limits import API_LIMITS

from . import _aio
from ._api import ApiCalls
from ._core import (LEADER_HEADER, TRANSPORT_ERRORS, Call, Rotation, SeqTracker,
                    build_request, decode, describe_failure, error_from, is_connect_failure,
                    is_retryable_status, overload_wait_s, parse_urls, to_time, unavailable)

CONNECT_TIMEOUT_S = 2.0    # a dead or unreachable node must not eat the whole deadline
ATTEMPT_READ_S = 10.0      # longer than a node's own commit wait, shorter than the deadline
PAGE_SIZE = 100
PAGE_SIZE_MAX = API_LIMITS.list_page_items_max   # the API's bound on `limit`
# submit_batches: tasks per request (one Raft entry each) and requests in flight at once.
# One batch at a time, a producer waited a whole commit (~30 ms for 500 tasks on a loaded
# 2-core machine) per batch with the cluster mostly idle; a few in flight keep it busy.
SUBMIT_BATCH = 500
SUBMIT_BATCH_MAX = API_LIMITS.request_items_max
SUBMIT_IN_FLIGHT = 4
SUBMIT_IN_FLIGHT_MAX = 16   # a node serves 256 submits at once (admission): one producer
                            # keeps well within that


class _Base(ApiCalls):
    def __init__(self, urls: str | Iterable[str], token: str | None = None,
                 timeout_s: float = 30.0, ca_file: str | None = None) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.urls = parse_urls(urls)
        self.token = token
        # https:// nodes are verified against this CA bundle (else the system's trust store).
        self._verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=ca_file)
                                               if ca_file else True)
        self.timeout_s = timeout_s
        self._rotation = Rotation(self.urls)
        self._seq = SeqTracker()

    @property
    def applied_seq(self) -> int:
        """The highest `applied_seq` this client has seen."""
        return self._seq.seen

    def _deadline(self, call: Call) -> float:
        total_s = self.timeout_s if call.deadline_s is None else call.deadline_s
        return time.monotonic() + total_s + (call.read_timeout_s or 0)

    @staticmethod
    def _timeouts(call: Call, remaining_s: float) -> tuple[float, float]:
        """(read, connect) seconds of one try. It waits at most ATTEMPT_READ_S (a long poll:
        its wait plus slack): a node that hangs is left for the next one, and a repeated
        write is safe (same key)."""
        if call.read_timeout_s is None:
            read = min(max(remaining_s, 0.001), ATTEMPT_READ_S)
        else:
            read = call.read_timeout_s
        return read, min(CONNECT_TIMEOUT_S, max(remaining_s, 0.001))

    def _answer(self, url: str, resp: Any, call: Call) -> Any:
        """The body of a served answer (2xx) or its ApiError (4xx, 500)."""
        body = decode(resp)
        self._seq.note(body, resp.headers)
        self._rotation.success(url, call.to_leader, resp.headers.get(LEADER_HEADER),
                               call.leader_first)
        if resp.status_code >= 400:
            raise error_from(resp, body)
        return body

    @staticmethod
    def _page_params(filters: dict[str, Any], cursor: str | None,
                     left: int | None) -> dict[str, Any]:
        size = PAGE_SIZE if left is None else max(1, min(PAGE_SIZE_MAX, left))
        return {**filters, "cursor": cursor, "limit": size}


class Client(_Base):
    """Synchronous client. `urls`: a list or a comma-separated string of node URLs.
    `unreachable_s`: give up a call sooner than `timeout_s` when, that long into it, no
    node has accepted a connection at all (refused, unresolvable, a TLS mismatch): a
    mistyped URL or a stopped cluster, not a failover, where some node still answers.
    Default: None, the whole `timeout_s`."""

    def __init__(self, urls: str | Iterable[str], token: str | None = None,
                 timeout_s: float = 30.0, ca_file: str | None = None,
                 unreachable_s: float | None = None) -> None:
        super().__init__(urls, token, timeout_s, ca_file)
        if unreachable_s is not None and unreachable_s <= 0:
            raise ValueError("unreachable_s must be positive")
        self.unreachable_s = unreachable_s
        self._http = httpx.Client(verify=self._verify)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, call: Call, post: Callable[[Any], Any] | None = None) -> Any:
        body = self._send(call)
        return post(body) if post else body

    def _send(self, call: Call) -> Any:
        deadline = self._deadline(call)
        unreached_until = None if self.unreachable_s is None \
            else time.monotonic() + self.unreachable_s   # None once a node was reached
        last, overloads, failures = None, 0, {}
        for url, delay in self._rotation.attempts(call.to_leader or call.leader_first):
            if time.monotonic() + delay >= min(deadline, unreached_until or deadline):
                break
            if delay:
                time.sleep(delay)   # backoff between rounds of failed nodes
            remaining = deadline - time.monotonic()
            kwargs = build_request(call, url, self.token, self._seq.min_seq())
            read_s, connect_s = self._timeouts(call, remaining)
            try:
                resp = self._http.request(**kwargs, timeout=httpx.Timeout(read_s,
                                                                          connect=connect_s))
            except TRANSPORT_ERRORS as exc:
                last = failures[url] = describe_failure(exc, None)
                unreached_until = unreached_until if is_connect_failure(exc) else None
                continue
            unreached_until = None
            if is_retryable_status(resp):
                last = failures[url] = describe_failure(None, resp)
                continue
            wait = overload_wait_s(call, resp, overloads, deadline - time.monotonic())
            if wait is not None:   # 429 overloaded: wait as told, then the same request again
                overloads += 1
                time.sleep(wait)
                continue
            return self._answer(url, resp, call)
        raise unavailable(call, last, failures)

    def submit_batches(self, tasks: Iterable[dict[str, Any]], batch: int = SUBMIT_BATCH,
                       in_flight: int = SUBMIT_IN_FLIGHT, minimal: bool = False) -> list[Any]:
        """Submit many tasks as batches of `batch` (`submit_many` each: one request, one
        Raft entry), up to `in_flight` of them at once (threads), so that a producer is
        bound by the cluster rather than by one commit's wait per batch. Returns the
        answers in the order of `tasks`. Batches may be applied in any order (`in_flight=1`
        keeps the order of submission). A failed batch raises its error once the batches
        in flight have ended; batches not yet sent then are not sent, and the others were
        submitted (give tasks an `idempotency_key` to submit the same list again safely)."""
        chunks = submit_chunks(tasks, batch, in_flight)
        failed: list[BaseException] = []

        def one(chunk: list[dict[str, Any]]) -> Any:
            if failed:
                return failed[0]
            try:
                return self.submit_many(chunk, minimal=minimal)
            except Exception as exc:   # noqa: BLE001 - raised by joined, in order
                failed.append(exc)
                return exc
        with ThreadPoolExecutor(max_workers=in_flight) as pool:
            # each batch in a copy of the caller's context: its trace (otel) goes along
            futures = [pool.submit(contextvars.copy_context().run, one, chunk)
                       for chunk in chunks]
            return joined([f.result() for f in futures])

    def list(self, limit: int | None = None, **filters: Any) -> Iterator[dict]:
        """Tasks, newest first, following `next_cursor` (a page may stop early, even empty,
        when the node examined its bound of tasks: the next one goes on). Filters: state,
        tenant, task_type, schedule_id, created_after, created_before, finished_after (a
        datetime, epoch s or RFC 3339). `limit` caps the total yielded."""
        yield from self._paged("/v1/tasks", "tasks", limit, task_filters(filters))

    def dlq_list(self, tenant: str | None = None, limit: int | None = None) -> Iterator[dict]:
        yield from self.list(limit=limit, state="dead_letter", tenant=tenant)

    def list_schedules(self, tenant: str | None = None, limit: int | None = None) -> Iterator[dict]:
        yield from self._paged("/v1/schedules", "schedules", limit, {"tenant": tenant})

    def audit(self, limit: int | None = None, **filters: Any) -> Iterator[dict]:
        """The audit trail, newest first (DESIGN 14.6). Filters: since (a datetime, epoch s
        or RFC 3339), actor, action, target. `limit` caps the total yielded."""
        yield from self._paged("/v1/audit", "entries", limit, audit_filters(filters))

    def list_workflows(self, tenant: str | None = None, state: str | None = None,
                       limit: int | None = None) -> Iterator[dict]:
        """Workflows, newest first (without their steps), following `next_cursor`."""
        yield from self._paged("/v1/workflows", "workflows", limit,
                               {"tenant": tenant, "state": state})

    def _paged(self, path: str, key: str, limit: int | None, filters: dict) -> Iterator[dict]:
        cursor, count = None, 0
        while True:
            body = self._send(Call("GET", path, params=self._page_params(
                filters, cursor, None if limit is None else limit - count)))
            items, cursor = page_of(body, key, limit, count)
            count += len(items)
            yield from items
            if cursor is None:
                return


def page_of(body: dict, key: str, limit: int | None, count: int) -> tuple[list, str | None]:
    """One page of a listing: its items within `limit` (`count` already yielded), and the
    cursor of the next page (None: the listing ends here)."""
    items = body.get(key) or []
    if limit is not None:
        items = items[:max(0, limit - count)]
    cursor = body.get("next_cursor")
    if not cursor or (limit is not None and count + len(items) >= limit):
        cursor = None
    return items, cursor


class AsyncClient(_Base):
    """The asyncio twin of `Client`: the same calls, awaited."""

    def __init__(self, urls: str | Iterable[str], token: str | None = None,
                 timeout_s: float = 30.0, ca_file: str | None = None) -> None:
        super().__init__(urls, token, timeout_s, ca_file)
        self._http = _aio.AioTransport(self._verify)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _run(self, call: Call, post: Callable[[Any], Any] | None = None) -> Any:
        body = await self._send(call)
        return post(body) if post else body

    async def _send(self, call: Call) -> Any:
        deadline = self._deadline(call)
        last, overloads, failures = None, 0, {}
        for url, delay in self._rotation.attempts(call.to_leader or call.leader_first):
            if time.monotonic() + delay >= deadline:
                break
            if delay:
                await asyncio.sleep(delay)   # backoff between rounds of failed nodes
            remaining = deadline - time.monotonic()
            kwargs = build_request(call, url, self.token, self._seq.min_seq())
            read_s, connect_s = self._timeouts(call, remaining)
            try:
                resp = await self._http.request(**kwargs, read_s=read_s, connect_s=connect_s)
            except _aio.TRANSPORT_ERRORS as exc:
                last = failures[url] = describe_failure(exc, None)
                continue
            if is_retryable_status(resp):
                last = failures[url] = describe_failure(None, resp)
                continue
            wait = overload_wait_s(call, resp, overloads, deadline - time.monotonic())
            if wait is not None:   # 429 overloaded: wait as told, then the same request again
                overloads += 1
                await asyncio.sleep(wait)
                continue
            return self._answer(url, resp, call)
        raise unavailable(call, last, failures)

    async def submit_batches(self, tasks: Iterable[dict[str, Any]], batch: int = SUBMIT_BATCH,
                             in_flight: int = SUBMIT_IN_FLIGHT,
                             minimal: bool = False) -> list[Any]:
        """`Client.submit_batches`, with up to `in_flight` requests on the loop at once."""
        chunks = submit_chunks(tasks, batch, in_flight)
        slots = asyncio.Semaphore(in_flight)
        failed: list[BaseException] = []

        async def one(chunk: list[dict[str, Any]]) -> Any:
            async with slots:
                if failed:
                    return failed[0]
                try:
                    return await self.submit_many(chunk, minimal=minimal)
                except Exception as exc:   # noqa: BLE001 - raised by joined, in order
                    failed.append(exc)
                    return exc
        return joined(list(await asyncio.gather(*(one(chunk) for chunk in chunks))))

    async def list(self, limit: int | None = None, **filters: Any) -> AsyncIterator[dict]:
        async for item in self._paged("/v1/tasks", "tasks", limit, task_filters(filters)):
            yield item

    async def dlq_list(self, tenant: str | None = None,
                       limit: int | None = None) -> AsyncIterator[dict]:
        async for item in self.list(limit=limit, state="dead_letter", tenant=tenant):
            yield item

    async def audit(self, limit: int | None = None, **filters: Any) -> AsyncIterator[dict]:
        async for item in self._paged("/v1/audit", "entries", limit, audit_filters(filters)):
            yield item

    async def list_schedules(self, tenant: str | None = None,
                             limit: int | None = None) -> AsyncIterator[dict]:
        async for item in self._paged("/v1/schedules", "schedules", limit, {"tenant": tenant}):
            yield item

    async def list_workflows(self, tenant: str | None = None, state: str | None = None,
                             limit: int | None = None) -> AsyncIterator[dict]:
        async for item in self._paged("/v1/workflows", "workflows", limit,
                                      {"tenant": tenant, "state": state}):
            yield item

    async def _paged(self, path: str, key: str, limit: int | None,
                     filters: dict) -> AsyncIterator[dict]:
        cursor, count = None, 0
        while True:
            body = await self._send(Call("GET", path, params=self._page_params(
                filters, cursor, None if limit is None else limit - count)))
            items, cursor = page_of(body, key, limit, count)
            count += len(items)
            for item in items:
                yield item
            if cursor is None:
                return


TASK_TIMES = ("created_after", "created_before", "finished_after")


def task_filters(filters: dict[str, Any]) -> dict[str, Any]:
    """A task listing's filters, its times as the API takes them."""
    return {k: to_time(v) if k in TASK_TIMES else v for k, v in filters.items()}


def audit_filters(filters: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(filters) - {"since", "actor", "action", "target"})
    if unknown:
        raise TypeError(f"unknown audit filter(s): {', '.join(unknown)}")
    return {**filters, "since": to_time(filters.get("since"))}


def submit_chunks(tasks: Iterable[dict[str, Any]], batch: int, in_flight: int
                  ) -> list[list[dict[str, Any]]]:
    """`tasks` cut into batches of `batch`; ValueError for a bound out of range."""
    if not 1 <= batch <= SUBMIT_BATCH_MAX:
        raise ValueError(f"batch must be in 1..{SUBMIT_BATCH_MAX}")
    if not 1 <= in_flight <= SUBMIT_IN_FLIGHT_MAX:
        raise ValueError(f"in_flight must be in 1..{SUBMIT_IN_FLIGHT_MAX}")
    items = list(tasks)
    return [items[i:i + batch] for i in range(0, len(items), batch)]


def joined(answers: list[Any]) -> list[Any]:
    """The batches' answers in order, or the first batch's error (once all have ended)."""
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    return [task for answer in answers for task in answer]
