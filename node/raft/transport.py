"""pysyncobj's TCP transport, guarded: peers dialled at their own address, a bound on
every message, admin messages and unknown identities refused, and the journal made durable
(one group commit) before any vote or replication message leaves (DESIGN.md section 6)."""
from __future__ import annotations

import collections
import errno
import logging
import pickle
import socket
import struct
import zlib
from typing import Callable

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic as monotonicTime
from pysyncobj import SyncObj
from pysyncobj.node import Node, TCPNode
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from tsched.node.failpoints import Failpoints
from tsched.node.raft.journal import LmdbJournal
from tsched.node.raft.prevote import PreVote
from tsched.node.raft.rejoin import RejoinGate
from tsched.node.raft.replication import ReplicationStats

log = logging.getLogger("tsched.node.raft.replica")   # the replica's log lines, as they were

# Messages that reflect the log, term or vote: the journal is synced before each leaves,
# except a leader's append_entries, whose entries are handed to the log writer instead,
# and a follower's next_node_idx, which waits in `DeferredAcks` until they are durable.
DURABLE_BEFORE_SEND = frozenset({"append_entries", "next_node_idx", "request_vote", "response_vote"})
ALLOWED_UTILITY_MESSAGES = frozenset({"status"})
REFUSED_LOG_EVERY_S = 60.0
REFUSALS_FRESH_S = 30.0   # a peer's refusal of this node counts this long


class Refusals:
    """The peers that refused this node's identity ("FAIL refused": not a member there),
    each with the monotonic time of its last refusal. Written on the Raft thread, read by
    any (a dict swapped whole)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def refused_by(self, raft: str) -> None:
        self._last = {**self._last, raft: monotonicTime()}

    def recent(self, now: float | None = None) -> list[str]:
        """The Raft addresses of the peers that refused this node lately."""
        now = monotonicTime() if now is None else now
        return sorted(r for r, t in self._last.items() if now - t <= REFUSALS_FRESH_S)


class DialNode(TCPNode):
    """A peer with its Raft identity (`host:port`) that is dialled at another address."""

    def __init__(self, address: str, dial: str | None = None, **kwargs: str) -> None:
        super().__init__(address, **kwargs)
        self._dial = dial

    @property
    def ip(self) -> str:
        if self._dial is None:
            return super().ip
        return globalDnsResolver().resolve(self._dial.rsplit(":", 1)[0])

    @property
    def port(self) -> int:
        if self._dial is None:
            return super().port
        return int(self._dial.rsplit(":", 1)[1])


_WIRE_PICKLE_PROTOCOL = 5
_WIRE_ZLIB_LEVEL = 0


class BoundedConnection(TcpConnection):
    """pysyncobj's connection, with a bound and a cheaper encoding: refuses (disconnects)
    a message whose declared length exceeds the bound, before buffering it (pysyncobj
    itself accepts up to 2 GiB per message), and delivers every whole message that arrived
    before the peer's close."""

    _message_bytes_max = 64 << 20

    def send(self, message: object) -> None:
        """pysyncobj's framing (zlib stream of a pickle, optional Fernet, 4-byte length),
        encoded for CPU: pickle protocol 5 instead of 2 (which turns every log entry's
        bytes into a latin-1 str and back) and zlib level 0 (a stored stream) instead of
        3, which cost more Raft-thread time than any other step of replication. Peers
        decode either form with the same `pickle.loads(zlib.decompress(...))`."""
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = zlib.compress(pickle.dumps(message, _WIRE_PICKLE_PROTOCOL), _WIRE_ZLIB_LEVEL)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(monotonicTime()))
        self._TcpConnection__writeBuffer += struct.pack("i", len(data)) + data
        self._TcpConnection__trySendBuffer()

    _eof = False     # the peer closed; disconnected once what was read with it is parsed

    def disconnect(self) -> None:
        self._eof = False
        super().disconnect()

    def _TcpConnection__processRead(self) -> bool:
        """pysyncobj's read, except at the peer's close. pysyncobj disconnected at once,
        dropping the bytes read in the same turn: a peer's last message before it closes
        was lost, such as a member's "FAIL refused" to a removed node, which then did not
        learn it for many dials (its /readyz said so up to half a minute late)."""
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(self._TcpConnection__recvBufferSize)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.disconnect()
            return False
        if not incoming:
            self._eof = True
            return False
        self._TcpConnection__readBuffer += incoming
        return True

    def _TcpConnection__processParseMessage(self) -> object:
        message = self._parse_bounded()
        if message is None and self._eof:
            self.disconnect()    # every whole message read before the close is delivered
        return message

    def _parse_bounded(self) -> object:
        buf = self._TcpConnection__readBuffer
        if len(buf) >= 4:
            declared = struct.unpack("i", buf[:4])[0]
            if declared < 0 or declared > self._message_bytes_max:
                log.warning("raft: refused a %d-byte message (limit %d); disconnecting",
                            declared, self._message_bytes_max)
                self.disconnect()
                return None
        return TcpConnection._TcpConnection__processParseMessage(self)


def _bound(conn: TcpConnection, limit: int) -> None:
    conn.__class__ = BoundedConnection
    conn._message_bytes_max = limit


class DeferredAcks:
    """A follower's `next_node_idx` answers, each sent once the log writer has made durable
    every entry it acknowledges: the Raft thread hands the entries to the writer
    (`sync_soon`) and goes on reading the next AppendEntries meanwhile. Sent in order;
    dropped when the term changes or the log's tail was truncated since (the entries
    acknowledged may no longer be the ones on disk): the leader's next heartbeat asks again.
    On the Raft thread only."""

    def __init__(self, journal: LmdbJournal, send_now: Callable[[Node, dict], bool],
                 term: Callable[[], int]) -> None:
        self._journal, self._send_now, self._term = journal, send_now, term
        self._queue: collections.deque[tuple[Node, dict, int, int, int]] = collections.deque()
        self.deferred = 0     # acknowledgements that waited for the writer (tests, metrics)
        self.dropped = 0

    def send(self, node: Node, message: dict) -> bool:
        journal = self._journal
        journal.sync_soon()
        need = message["next_node_idx"] - 1 if message.get("success") else 0
        if not self._queue and self._durable(need, journal.generation):
            return self._send_now(node, message)
        self._queue.append((node, message, need, journal.generation, self._term()))
        self.deferred += 1
        return True

    def _durable(self, need: int, generation: int) -> bool:
        journal = self._journal
        return need <= 0 or (journal.durable_generation == generation
                             and journal.durable_idx >= need)

    def flush(self) -> None:
        queue, journal, term = self._queue, self._journal, self._term()
        while queue:
            node, message, need, generation, made_in = queue[0]
            if made_in != term or generation != journal.generation:
                queue.popleft()
                self.dropped += 1
                continue
            if not self._durable(need, generation):
                return
            queue.popleft()
            self._send_now(node, message)


class GuardedTransport(TCPTransport):
    def __init__(self, syncObj: SyncObj, selfNode: Node, otherNodes: list[Node], *,
                 journal: LmdbJournal, failpoints: Failpoints, message_bytes_max: int,
                 replication: ReplicationStats, gate: RejoinGate, prevote: PreVote | None,
                 may_lead: Callable[[], bool],
                 dial_of: Callable[[str], str | None] = lambda _addr: None,
                 refusals: Refusals | None = None) -> None:
        self._journal = journal
        self._refusals = refusals if refusals is not None else Refusals()
        self._dial_of = dial_of
        self._refused_logged: dict[str, float] = {}
        self._replication = replication
        self._gate = gate
        self._prevote = prevote
        self._may_lead = may_lead
        self._failpoints = failpoints
        self._message_bytes_max = message_bytes_max
        self._acks = DeferredAcks(journal, self._send_now, lambda: syncObj.raftCurrentTerm)
        super().__init__(syncObj, selfNode, otherNodes)

    def addNode(self, node: Node) -> None:
        if isinstance(node, DialNode):
            # A member added by a log entry: dialled as this node dials it, not as the
            # proposer did (its `_dial` travelled in the entry).
            node._dial = self._dial_of(node.address)
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None:
            _bound(conn, self._message_bytes_max)

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:
        _bound(conn, self._message_bytes_max)
        super()._onNewIncomingConnection(conn)

    def _onIncomingMessageReceived(self, conn: TcpConnection, message: object) -> None:
        if self._syncObj.encryptor and not conn.sendRandKey:
            return super()._onIncomingMessageReceived(conn, message)   # key exchange
        if isinstance(message, list):
            if message[:1] and message[0] in ALLOWED_UTILITY_MESSAGES:
                return super()._onIncomingMessageReceived(conn, message)
            return self._refuse(conn, f"utility message {message[:1]!r}")
        # Only configured peers may identify themselves; no read-only observers.
        if not isinstance(message, str) or message not in self._nodeAddrToNode:
            return self._refuse(conn, f"identity {str(message)[:64]!r}")
        return super()._onIncomingMessageReceived(conn, message)

    def _onMessageReceived(self, node: Node, message: object) -> None:
        if not isinstance(message, dict):
            # A peer's refusal ("FAIL refused") of this node's identity: it is not (or no
            # longer, or not yet) a member there (DESIGN 6.2). Raft messages are dicts.
            self._refusals.refused_by(node.id)
            self._log_limited(f"refusal by {node.id}", "raft: %s refused this node's "
                              "connection (%.40r): not a member there; logged once a minute",
                              node.id, message)
            return
        if message.get("type") == "request_vote" and not self._gate.may_vote():
            return   # a node rejoining empty grants no vote (rejoin.py)
        if message.get("type") == "timeout_now" and not self._may_lead():
            return   # a stopping node takes no leadership handed over to it
        if self._prevote is not None and self._prevote.on_message(self._syncObj, node, message):
            return
        super()._onMessageReceived(node, message)

    def _refuse(self, conn: TcpConnection, what: str) -> None:
        # Once a minute per kind: a removed member (DESIGN 6.2) dials every second.
        self._log_limited(what, "raft: refused %s on an incoming connection (a node that is "
                          "not a member, or not configured; logged once a minute)", what)
        conn.send("FAIL refused")
        conn.disconnect()
        self._unknownConnections.discard(conn)

    def _log_limited(self, key: str, fmt: str, *args: object) -> None:
        now = monotonicTime()
        if now - self._refused_logged.get(key, -REFUSED_LOG_EVERY_S) >= REFUSED_LOG_EVERY_S:
            self._refused_logged[key] = now
            log.warning(fmt, *args)

    def send(self, node: Node, message: dict) -> bool:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind in DURABLE_BEFORE_SEND and not self._failpoints.on("skip_sync_before_send"):
            if kind == "next_node_idx":
                return self._acks.send(node, message)    # once its entries are durable
            if kind == "append_entries":
                # A leader sends before its own fsync: the writer commits meanwhile, and
                # the leader counts itself only up to what is durable (own_durability.py).
                self._journal.sync_soon()
            else:
                self._journal.sync()
        if kind == "append_entries":
            self._replication.on_sent(node, message.get("entries"))
        return self._send_now(node, message)

    def _send_now(self, node: Node, message: dict) -> bool:
        sent = super().send(node, message)
        if message.get("type") == "next_node_idx" and sent and self._failpoints.on("crash_after_ack"):
            self._maybe_crash_after_ack(message)
        return sent

    def flush_acks(self) -> None:
        """Send the acknowledgements whose entries the log writer has made durable (each
        tick: the writer's commit wakes the Raft thread)."""
        self._acks.flush()

    def _maybe_crash_after_ack(self, message: dict) -> None:
        acked = message["next_node_idx"] - 1
        if message["success"] and acked > self._journal.startup_last_idx:
            self._failpoints.crash(f"acked {acked}")

