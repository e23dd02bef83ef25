"""Single-submit load from one generator process: a closed loop (the sustainable rate) or
an open loop (a fixed rate whatever the answers), for bench/overload.py.

`bench.overload` runs several of these processes at once: one asyncio process parsing
thousands of answers a second falls behind on a busy 2-core machine, and an answer that
waits unread in its socket is generator lag, not node latency. Each function here is
called in a worker process with a plain dict and returns plain lists (pickled back).
"""
from __future__ import annotations

import asyncio
import time

import orjson

from .api import install_fast_loop

SUBMIT_TIMEOUT_S = 60.0
TICK_S = 0.005
JSON = {"Content-Type": "application/json"}
SHED_REASONS = ("priority", "queue_full", "busy")


def task(task_type: str, i: int) -> dict:
    """Priorities 0..10 spread evenly over the submits."""
    return {"task_type": task_type, "priority": i % 11, "payload": {"i": i}}


def kind_of(status: int, body) -> str:
    """accepted, the `overloaded` reason (priority, queue_full, busy), or the error code."""
    if status == 201:
        return "accepted"
    err = (body.get("error") or {}) if isinstance(body, dict) else {}
    if status == 429 and err.get("code") == "overloaded":
        return (err.get("details") or {}).get("reason") or "overloaded"
    return err.get("code") or f"http_{status}"


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection answering one request at a time. The node always
    answers with a Content-Length, so reading an answer is finding the header's end and
    counting bytes: far cheaper than a general client, whose CPU on a busy machine would
    show up as latency."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.answer: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.answer is not None and not self.answer.done():
            answer = _split_answer(self.buf)
            if answer is not None:
                self.answer.set_result(answer)

    def connection_lost(self, exc) -> None:
        self.transport = None
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(ConnectionError("the node closed the connection"))


def _split_answer(buf: bytearray) -> tuple[int, bytes] | None:
    """(status, body) of the first whole answer in `buf`, taken out of it; None: not yet."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = bytes(buf[:head_end]).lower()
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name == b"content-length":
            length = int(value)
    end = head_end + 4 + length
    if len(buf) < end:
        return None
    status, body = int(head[9:12]), bytes(buf[head_end + 4:end])
    del buf[:end]
    return status, body


class Sender:
    """Single submits, each on a connection of its own while in flight (idle ones are
    reused; none waits for a connection), timed from the request's bytes handed to the
    socket to the whole answer read."""

    def __init__(self) -> None:
        self.idle: dict[str, list[_Connection]] = {}

    async def _connection(self, url: str, fresh: bool = False) -> _Connection:
        idle = self.idle.setdefault(url, [])
        while idle and not fresh:
            conn = idle.pop()
            if conn.transport is not None:
                return conn
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        _, conn = await asyncio.get_running_loop().create_connection(_Connection, host,
                                                                     int(port))
        return conn

    async def open(self, urls: list[str], count: int, at_once: int = 20) -> None:
        """Open `count` idle connections spread over `urls` before the load starts, as a
        client pool would hold them: a storm of new connections under load overflows a
        node's accept queue, and TCP retries those connects seconds later."""
        for first in range(0, count, at_once):
            conns = await asyncio.gather(*(self._connection(urls[i % len(urls)], fresh=True)
                                           for i in range(first, min(count, first + at_once))))
            for i, conn in enumerate(conns, first):
                self.idle.setdefault(urls[i % len(urls)], []).append(conn)

    async def submit(self, url: str, body: dict) -> tuple[str, float | None, float]:
        """(kind, when sent or None, when answered), perf_counter seconds."""
        sent = None
        try:
            conn = await self._connection(url)
            data = orjson.dumps(body)
            conn.answer = asyncio.get_running_loop().create_future()
            conn.transport.write(b"POST /v1/tasks HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                                 b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (url.split("//", 1)[1].encode(), len(data), data))
            sent = time.perf_counter()
            status, raw = await asyncio.wait_for(conn.answer, SUBMIT_TIMEOUT_S)
            kind = "accepted" if status == 201 else kind_of(status, orjson.loads(raw or b"null"))
            self.idle[url].append(conn)
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            kind = f"transport:{type(e).__name__}"
            if sent is not None and conn.transport is not None:
                conn.transport.close()
        return kind, sent, time.perf_counter()

    async def close(self) -> None:
        for conns in self.idle.values():
            for conn in conns:
                if conn.transport is not None:
                    conn.transport.close()


class Samples:
    """One list per field (cheap to pickle): kind, answered at (s from the start), latency
    from the send (ms, NaN when the request never went out) and from the schedule (ms)."""

    def __init__(self) -> None:
        self.kind: list[str] = []
        self.at_s: list[float] = []
        self.send_ms: list[float] = []
        self.schedule_ms: list[float] = []
        self.not_sent = 0

    def add(self, kind: str, start: float, due: float, sent: float | None,
            answered: float) -> None:
        self.kind.append(kind)
        self.at_s.append(answered - start)
        self.send_ms.append((answered - sent) * 1000 if sent is not None else float("nan"))
        self.schedule_ms.append((answered - due) * 1000)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "at_s": self.at_s, "send_ms": self.send_ms,
                "schedule_ms": self.schedule_ms, "not_sent": self.not_sent}


def run(spec: dict) -> dict:
    """A worker process's entry: `spec["mode"]` is "closed" or "open"."""
    install_fast_loop()
    return asyncio.run(_run(spec))


async def _run(spec: dict) -> dict:
    sender = Sender()
    await sender.open(spec["urls"], int(spec.get("in_flight_max") or spec["concurrency"]))
    await asyncio.sleep(max(0.0, spec["start_at"] - time.time()))   # all processes at once
    try:
        loop = closed_loop if spec["mode"] == "closed" else open_loop
        return (await loop(sender, spec)).as_dict()
    finally:
        await sender.close()


async def closed_loop(sender: Sender, spec: dict) -> Samples:
    """`concurrency` submitters, each sending its next submit when answered."""
    urls, step, first = spec["urls"], spec["step"], spec["first"]
    out, start = Samples(), time.perf_counter()
    end = start + spec["seconds"]

    async def submitter(i: int) -> None:
        while time.perf_counter() < end:
            due = time.perf_counter()
            kind, sent, answered = await sender.submit(urls[i % len(urls)],
                                                       task(spec["task_type"], i))
            out.add(kind, start, due, sent, answered)
            i += step * spec["concurrency"]
    await asyncio.gather(*(submitter(first + step * c) for c in range(spec["concurrency"])))
    return out


async def open_loop(sender: Sender, spec: dict) -> Samples:
    """`rate` submits/s for `seconds` whatever the answers; past `in_flight_max` waiting
    answers a due submit is counted as not sent."""
    urls, rate, step, first = spec["urls"], spec["rate"], spec["step"], spec["first"]
    out, start = Samples(), time.perf_counter()
    in_flight, sent, tasks = 0, 0, set()

    async def one(n: int, due: float) -> None:
        nonlocal in_flight
        i = first + step * n
        kind, when_sent, answered = await sender.submit(urls[i % len(urls)],
                                                        task(spec["task_type"], i))
        out.add(kind, start, due, when_sent, answered)
        in_flight -= 1

    while (now := time.perf_counter()) - start < spec["seconds"]:
        while sent < int((now - start) * rate):
            if in_flight >= spec["in_flight_max"]:
                out.not_sent += 1
            else:
                in_flight += 1
                t = asyncio.ensure_future(one(sent, start + sent / rate))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            sent += 1
        await asyncio.sleep(TICK_S)
    if tasks:
        await asyncio.wait(tasks, timeout=SUBMIT_TIMEOUT_S + 30)
    return out
