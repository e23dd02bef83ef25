"""A peer's last message before it closes is delivered (transport.BoundedConnection): a
member's "FAIL refused" to a removed node arrives with its close, and the removed node
must read it (its /readyz says it is not a member: DESIGN 6.2)."""
from __future__ import annotations

import pickle
import socket
import struct
import zlib

from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import TcpConnection

from tsched.node.raft.transport import BoundedConnection


def _frame(message: object) -> bytes:
    data = zlib.compress(pickle.dumps(message))
    return struct.pack("i", len(data)) + data


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection (a peer's close is a FIN, as between nodes)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer = socket.create_connection(server.getsockname())
        mine, _ = server.accept()
    mine.setblocking(False)
    return mine, peer


def _read_until_closed(cls: type[TcpConnection]) -> list[object]:
    """What a connection of class `cls` delivers of a peer that sends two messages and
    closes at once (both and the close are in the socket before the first read)."""
    mine, peer = _tcp_pair()
    events: list[object] = []
    poller = createPoller("auto")
    conn = cls(poller, onMessageReceived=events.append,
               onDisconnected=lambda: events.append("closed"), socket=mine)
    peer.sendall(_frame({"type": "hello"}) + _frame("FAIL refused"))
    peer.close()
    for _ in range(100):
        if "closed" in events:
            break
        poller.poll(0.05)
    conn.disconnect()
    return events


def test_messages_sent_just_before_the_close_are_delivered_then_the_close():
    assert _read_until_closed(BoundedConnection) == [{"type": "hello"}, "FAIL refused",
                                                     "closed"]


def test_pysyncobj_alone_drops_them():
    """Why the override exists: the same bytes read by pysyncobj's own connection."""
    assert _read_until_closed(TcpConnection) == ["closed"]


def test_a_connection_reused_after_a_close_starts_without_it():
    mine, peer = _tcp_pair()
    conn = BoundedConnection(createPoller("auto"), socket=mine)
    conn._eof = True
    conn.disconnect()
    assert conn._eof is False
    peer.close()
