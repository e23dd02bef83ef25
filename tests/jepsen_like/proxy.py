"""A fault-injecting TCP proxy: one `Link` per controllable connection path.

The proxies run on their own asyncio loop in a background thread (`ProxyHub`), so a busy
harness loop never delays Raft traffic, and the harness switches modes from any thread.

Modes of a link:
- `pass`: forward both ways.
- `drop`: black hole. Connections are accepted and read, nothing is forwarded (new ones are
  not even dialled onward). The peers see silence, as behind a partition.
- `reset`: every open connection is reset (RST) and new ones are reset on accept.
- `delay`: forward both ways, each chunk `delay_ms` late, order kept.
- `one_way`: forward only the `forward` direction: "up" is dialer -> listener, "down" is
  listener -> dialer. The other direction is swallowed.

What "one-way" means on a single TCP connection: each side's TCP is terminated at the
proxy, so the sender's kernel still gets its ACKs; the loss is of application messages, in
one direction only, on an otherwise healthy-looking connection. pysyncobj runs both
directions of a node pair over one connection, so this is a one-way message loss between
the two nodes (requests arrive, answers do not, or the reverse).

Leaving `drop` or `one_way` resets the connections that lost bytes: a byte stream with a
gap would desynchronise the peers' framing, whereas a real partition that heals either
resumes the stream intact or ends in a TCP timeout. The peers then reconnect.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

MODES = ("pass", "drop", "reset", "delay", "one_way")
CHUNK_BYTES = 65536


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def _abort(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST (SO_LINGER 0) so the peer sees a reset, not a clean end."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tainted: bool = False                  # bytes were swallowed: the stream has a gap
    tasks: list = field(default_factory=list)

    def abort(self, cancel: bool = True) -> None:
        _abort(self.client)
        _abort(self.upstream)
        for t in self.tasks if cancel else ():
            t.cancel()


class Link:
    """One listening proxy in front of `target`; its mode applies to all its connections."""

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        self.target = target
        self.mode = "pass"
        self.delay_ms = 0
        self.forward = "up"
        self.conns: set[_Conn] = set()
        self.server: asyncio.base_events.Server | None = None
        self.listen = ""
        self.bytes_forwarded = 0
        self.bytes_dropped = 0

    async def start(self, host: str = "127.0.0.1") -> str:
        self.server = await asyncio.start_server(self._accept, host, 0)
        port = self.server.sockets[0].getsockname()[1]
        self.listen = f"{host}:{port}"
        return self.listen

    def set_mode(self, mode: str, delay_ms: int = 0, forward: str = "up") -> None:
        assert mode in MODES, mode
        assert forward in ("up", "down"), forward
        self.mode, self.delay_ms, self.forward = mode, delay_ms, forward
        for conn in list(self.conns):
            if mode == "reset" or (conn.tainted and mode in ("pass", "delay")):
                conn.abort()
                self.conns.discard(conn)

    def _allows(self, direction: str) -> bool:
        if self.mode in ("pass", "delay"):
            return True
        return self.mode == "one_way" and self.forward == direction

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "reset":
            _abort(writer)
            return
        conn = _Conn(writer)
        self.conns.add(conn)
        try:
            if self.mode == "drop":
                conn.tainted = True
                await self._swallow(reader)
                return
            host, port = _split(self.target)
            try:
                up_reader, conn.upstream = await asyncio.open_connection(host, port)
            except OSError:
                return
            conn.tasks = [asyncio.current_task()]
            await asyncio.gather(self._pump(conn, reader, conn.upstream, "up"),
                                 self._pump(conn, up_reader, writer, "down"))
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            conn.abort(cancel=False) if conn.tainted else self._close(conn)
            self.conns.discard(conn)

    @staticmethod
    def _close(conn: _Conn) -> None:
        for w in (conn.client, conn.upstream):
            if w is not None and not w.transport.is_closing():
                w.close()

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        while data := await reader.read(CHUNK_BYTES):
            self.bytes_dropped += len(data)

    async def _pump(self, conn: _Conn, reader, writer, direction: str) -> None:
        """Copy one direction; chunks wait in a queue so a delay keeps their order."""
        queue: asyncio.Queue = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer))
        try:
            while data := await reader.read(CHUNK_BYTES):
                if self._allows(direction):
                    due = time.monotonic() + (self.delay_ms / 1000 if self.mode == "delay" else 0)
                    queue.put_nowait((due, data))
                else:
                    conn.tainted = True
                    self.bytes_dropped += len(data)
            queue.put_nowait((0.0, b""))
            await sender
        finally:
            sender.cancel()

    async def _send(self, queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            wait_s = due - time.monotonic()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            writer.write(data)
            self.bytes_forwarded += len(data)
            await writer.drain()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for conn in list(self.conns):
            conn.abort()
        self.conns.clear()


class ProxyHub:
    """Owns the proxy thread and its loop; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: dict[str, Link] = {}
        self._thread = threading.Thread(target=self._run, name="proxy-hub", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, coro_or_fn, timeout_s: float = 10.0):
        if asyncio.iscoroutine(coro_or_fn):
            return asyncio.run_coroutine_threadsafe(coro_or_fn, self.loop).result(timeout_s)

        async def wrapper():
            return coro_or_fn()
        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout_s)

    def add(self, name: str, target: str) -> str:
        """Start a proxy to `target` ("host:port"); returns the address to dial instead."""
        link = Link(name, target)
        self.links[name] = link
        return self._call(link.start())

    def set(self, name: str, mode: str, delay_ms: int = 0, forward: str = "up") -> None:
        link = self.links[name]
        self._call(lambda: link.set_mode(mode, delay_ms, forward))

    def set_many(self, names, mode: str, **kw) -> None:
        for name in names:
            self.set(name, mode, **kw)

    def heal_all(self) -> None:
        for name in self.links:
            self.set(name, "pass")

    def stop(self) -> None:
        async def close_all():
            for link in self.links.values():
                await link.close()
        try:
            self._call(close_all())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
            self.loop.close()
