"""The fault proxy's modes against a local echo server (which also records what arrived)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.harness.waits import wait_until

from .proxy import ProxyHub

WAIT_S = 5.0


class EchoServer:
    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.received = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                with self.lock:
                    self.received += data
                try:
                    conn.sendall(data)
                except OSError:
                    return

    def got(self, data: bytes) -> bool:
        with self.lock:
            return data in self.received



@pytest.fixture
def setup():
    server = EchoServer()
    hub = ProxyHub()
    listen = hub.add("l", server.addr)
    yield server, hub, listen
    hub.stop()
    server.sock.close()


def dial(listen: str) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=WAIT_S)
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def test_pass_forwards_both_ways(setup):
    server, hub, listen = setup
    with dial(listen) as s:
        s.sendall(b"hello")
        assert recv_exactly(s, 5) == b"hello"
    assert server.got(b"hello")


def test_drop_swallows_and_heal_resets_the_gapped_connection(setup):
    server, hub, listen = setup
    with dial(listen) as s:
        s.sendall(b"one")
        assert recv_exactly(s, 3) == b"one"
        hub.set("l", "drop")
        s.sendall(b"lost")
        wait_until(lambda: hub.links["l"].bytes_dropped >= 4, WAIT_S, "four bytes dropped")
        assert not server.got(b"lost")
        hub.set("l", "pass")
        # the stream lost bytes, so healing resets it rather than resuming with a gap
        s.settimeout(WAIT_S)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            s.sendall(b"x")
            if s.recv(10) == b"":
                raise ConnectionResetError
    with dial(listen) as s:
        s.sendall(b"again")
        assert recv_exactly(s, 5) == b"again"


def test_drop_black_holes_new_connections(setup):
    server, hub, listen = setup
    hub.set("l", "drop")
    with dial(listen) as s:
        s.sendall(b"void")
        wait_until(lambda: hub.links["l"].bytes_dropped >= 4, WAIT_S, "four bytes dropped")
    assert not server.got(b"void")


def test_reset_closes_open_and_new_connections(setup):
    server, hub, listen = setup
    with dial(listen) as s:
        s.sendall(b"a")
        assert recv_exactly(s, 1) == b"a"
        hub.set("l", "reset")
        with pytest.raises(ConnectionResetError):
            if s.recv(10) == b"":
                raise ConnectionResetError
    # a new connection is reset at once: on loopback even connect() may see the RST
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        with dial(listen) as s:
            s.sendall(b"b")
            if s.recv(10) == b"":
                raise ConnectionResetError


def test_one_way_forwards_only_up(setup):
    server, hub, listen = setup
    with dial(listen) as s:
        hub.set("l", "one_way", forward="up")
        s.sendall(b"ping")
        wait_until(lambda: server.got(b"ping"), WAIT_S, "the ping through")
        # the echo came back to the proxy and was swallowed on the way down
        wait_until(lambda: hub.links["l"].bytes_dropped >= 4, WAIT_S, "four bytes dropped")
        s.settimeout(0.3)
        with pytest.raises(socket.timeout):
            s.recv(10)


def test_delay_holds_each_chunk(setup):
    server, hub, listen = setup
    hub.set("l", "delay", delay_ms=200)
    with dial(listen) as s:
        start = time.monotonic()
        s.sendall(b"slow")
        assert recv_exactly(s, 4) == b"slow"
        # two proxy hops (up and down), each at least the configured delay
        assert time.monotonic() - start >= 0.4
