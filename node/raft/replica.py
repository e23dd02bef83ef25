"""`Replica`: the state machine replicated by Raft (pysyncobj), the only pysyncobj user.

DESIGN.md sections 3, 4 and 6 list what this module guards against:
- exactly one `@replicated` method, `apply(blob)`, which never raises;
- the log in LMDB (`journal.py`), made durable by one group commit before any vote or
  replication message leaves the node (`_GuardedTransport.send`);
- snapshots written by a forked child, so the Raft thread stalls only for the fork;
- leadership that accounts for quorum and the leader's connection, and a barrier entry per
  term before a new leader calls itself ready;
- a Raft port bound to its configured address, refused admin messages, bounded messages,
  and no non-loopback address without a secret.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import gc
import hashlib
import ipaddress
import logging
import os
import pickle
import signal
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import crc32c
import msgpack
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic as monotonicTime
from pysyncobj.node import TCPNode
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from tsched.node.raft import journal as journal_mod
from tsched.node.raft.apply_budget import BoundedApply
from tsched.node.raft.prevote import PreVote
from tsched.node.raft.proposed import ProposedBatches
from tsched.node.raft.rejoin import RejoinGate
from tsched.node.raft.stall_clock import forgive_stall
from tsched.node.raft.watchdog import LATE_TICK_SHARE, Watchdog
from tsched.node.failpoints import NONE as NO_FAILPOINTS
from tsched.node.failpoints import Failpoints
from tsched.node.ops.gcpolicy import GcPolicy
from tsched.node.raft.replication import ReplicationStats, WastelessAppendEntries

log = logging.getLogger(__name__)


STATE_MACHINE_BUG_EXIT_CODE = 70
SNAPSHOT_MAGIC = b"TSCHSNP2"
# pysyncobj's own compaction bounds, set beyond reach: `Replica._compact_when_due` decides.
COMPACTION_NEVER = 1 << 62
SNAPSHOT_MAGIC_V1 = b"TSCHSNP1"     # no header checksum; SHA-256 of the state
_U32 = struct.Struct(">I")

# Messages that reflect the log, term or vote: the journal is synced before each leaves.
DURABLE_BEFORE_SEND = frozenset({"append_entries", "next_node_idx", "request_vote", "response_vote"})
ALLOWED_UTILITY_MESSAGES = frozenset({"status"})
_FAIL_NAMES = {v: k.lower() for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}
_ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}


class RaftSecurityError(ValueError):
    """The Raft configuration would expose an unauthenticated pickle port."""


@dataclass(frozen=True)
class RaftOptions:
    # Heartbeats (an AppendEntries with no new entry). New entries and a moved commit index
    # go out at once whatever this period (`_send_new_entries_now`); it is capped at a tenth
    # of the election and leader-fallback timeouts (`heartbeat_period_s`). 0.1 s against a
    # 1 s election timeout, as etcd's defaults: heartbeats were most of an idle replica's
    # CPU, and at 0.05 s the 15 processes of a 3-node cluster with 4 shards idled at 0.17
    # cores of 2 (0.10 at 0.1 s), taken from the load on every machine they share.
    append_entries_period_s: float = 0.1
    # The Raft thread sleeps in its poll until an event (a message, a proposal through
    # `_Waker`) or its next timer (heartbeat due, election deadline), at least this long
    # and at most `idle_tick_max_s`. A fixed 5 ms poll cost each replica process about
    # 35 ms of CPU per second doing nothing, paid once per shard replica (`_TimedPoller`).
    auto_tick_period_s: float = 0.005
    # A tick applies committed entries for at most this long (and at most a fifth of the
    # election and leader-fallback timeouts), then sends and reads before it applies more
    # (`apply_budget.py`): a backlog to apply must not silence a replica for an election
    # timeout. Not shorter: at 0.05 s a 10-minute load cut ~2,000 ticks, the leader's
    # among them, for no gain.
    apply_budget_s: float = 0.2
    idle_tick_max_s: float = 0.1
    raft_min_timeout_s: float = 1.0
    raft_max_timeout_s: float = 2.5
    # An isolated leader steps down this soon (pysyncobj's default of 30 s would keep it
    # accepting writes it can never commit).
    leader_fallback_timeout_s: float = 1.0
    connection_retry_s: float = 1.0
    connection_timeout_s: float = 3.0
    # Each compaction forks and writes the whole state: every 20k entries or 10 minutes,
    # each node in its own phase (`Replica._compact_when_due`).
    compaction_min_entries: int = 20_000
    compaction_min_time_s: float = 600.0
    # ... or once the applied part of the log holds this many bytes: the in-memory log tail
    # costs RSS and a restart replays it (submits cost ~350 B each and entries carry up to
    # thousands of commands, so an entry count alone let a 1M-task fill stay in the log).
    # Each node uses a share of it (`Replica.compaction_bytes`).
    compaction_min_bytes: int = 32 << 20
    # ... but never before the applied log holds this share of the last snapshot's bytes:
    # a snapshot writes the whole state, so a fixed threshold made its cost grow with the
    # state (at 1,000,000 retained tasks each 32 MiB of log cost a 166 MB snapshot, three
    # children at once took most of a 2-core machine and a 10-minute run slowed from 4,900
    # to 1,200 lifecycles/s). Proportional, the snapshot work per byte of log stays
    # constant, and the log tail (in memory, replayed on restart) stays under the snapshot.
    compaction_log_to_snapshot_ratio: float = 1.0
    # The snapshot child runs at this `nice`: it is background work and must not take the
    # CPU from the Raft thread and the HTTP loop it was forked from.
    snapshot_child_nice: int = 10
    # Larger than any entry: pysyncobj's chunked sending of one oversized entry is broken.
    append_entries_batch_bytes: int = 2 << 20
    entry_bytes_max: int = 1 << 20
    message_bytes_max: int = 64 << 20
    snapshot_chunk_bytes: int = 1 << 20
    # pysyncobj writes at most one socket buffer per poll cycle: 64 KiB made a 1 MiB
    # append take a dozen ticks.
    socket_buffer_bytes: int = 4 << 20
    commands_queue_max: int = 10_000
    bind_retries_max: int = 10
    bind_retry_s: float = 0.5
    fsync: bool = True
    # The watchdog (watchdog.py): the node stops when its Raft thread shows no progress
    # this long (longer than any election timeout: /readyz is false from the election
    # timeout on), or fails this many ticks in a row.
    watchdog_stall_exit_s: float = 10.0
    watchdog_tick_failures_max: int = 50
    # Ask before campaigning (prevote.py); off only to measure what it saves.
    pre_vote: bool = True


@dataclass(frozen=True)
class MachineKit:
    """How the replica makes, restores and feeds the state machine (a seam for tests)."""

    new: Callable[[], Any]
    restore: Callable[[bytes], Any]
    encode_batch: Callable[[list], bytes]
    decode_batch: Callable[[bytes], list]
    barrier: Callable[[str, int], Any]      # (request_id, now_ms) -> command
    # (cmds, blob) -> what decode_batch(blob) returns, for blob = encode_batch(cmds): a
    # replica applies the batches it proposed without decoding them (proposed.py); None:
    # it decodes every entry.
    as_batch: Callable[[list, bytes], Any] | None = None


def default_kit(limits=None) -> MachineKit:
    from tsched.statemachine import StateMachine, codec, commands
    from tsched.statemachine import Limits

    lim = limits if limits is not None else Limits()
    return MachineKit(
        new=lambda: StateMachine(limits=lim),
        restore=lambda blob: StateMachine.restore(blob, limits=lim),
        encode_batch=codec.encode_batch,
        decode_batch=codec.decode_batch,
        barrier=lambda rid, now_ms: commands.Barrier(request_id=rid, now_ms=now_ms),
        as_batch=commands.Batch.of,
    )


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_raft_security(addresses: list[str], secret: str | None) -> None:
    if secret:
        return
    exposed = [a for a in addresses if not is_loopback_host(a.rsplit(":", 1)[0])]
    if exposed:
        raise RaftSecurityError(
            f"Raft addresses {', '.join(exposed)} are not loopback: set cluster.secret "
            "(Raft messages are pickles; anyone who can connect could run code)")


class _View(NamedTuple):
    """What other threads may know of Raft: refreshed on every tick, swapped atomically."""

    role: int = 0
    term: int = 0
    leader: str | None = None          # raft address
    has_quorum: bool = False
    connected: frozenset = frozenset()   # raft addresses of connected peers
    commit_index: int = 0
    last_applied: int = 0
    commit_term: int = 0               # term of the entry at commit_index (0: not in the log)


# --- transport ---------------------------------------------------------------------------

class _DialNode(TCPNode):
    """A peer with its Raft identity (`host:port`) that is dialled at another address."""

    def __init__(self, address, dial: str | None = None, **kwargs):
        super().__init__(address, **kwargs)
        self._dial = dial

    @property
    def ip(self):
        if self._dial is None:
            return super().ip
        return globalDnsResolver().resolve(self._dial.rsplit(":", 1)[0])

    @property
    def port(self):
        if self._dial is None:
            return super().port
        return int(self._dial.rsplit(":", 1)[1])


_WIRE_PICKLE_PROTOCOL = 5
_WIRE_ZLIB_LEVEL = 0


class _BoundedConnection(TcpConnection):
    """Refuses (disconnects) a message whose declared length exceeds the bound, before
    buffering it; pysyncobj itself accepts up to 2 GiB per message."""

    _message_bytes_max = 64 << 20

    def send(self, message):
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

    def _TcpConnection__processParseMessage(self):
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
    conn.__class__ = _BoundedConnection
    conn._message_bytes_max = limit


class _GuardedTransport(TCPTransport):
    def __init__(self, syncObj, selfNode, otherNodes, *, journal, failpoints: Failpoints,
                 message_bytes_max: int, replication: ReplicationStats, gate: RejoinGate,
                 prevote: PreVote | None, may_lead: Callable[[], bool]):
        self._journal = journal
        self._replication = replication
        self._gate = gate
        self._prevote = prevote
        self._may_lead = may_lead
        self._failpoints = failpoints
        self._message_bytes_max = message_bytes_max
        super().__init__(syncObj, selfNode, otherNodes)

    def addNode(self, node):
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None:
            _bound(conn, self._message_bytes_max)

    def _onNewIncomingConnection(self, conn):
        _bound(conn, self._message_bytes_max)
        super()._onNewIncomingConnection(conn)

    def _onIncomingMessageReceived(self, conn, message):
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

    def _onMessageReceived(self, node, message):
        if isinstance(message, dict):
            if message.get("type") == "request_vote" and not self._gate.may_vote():
                return   # a node rejoining empty grants no vote (rejoin.py)
            if message.get("type") == "timeout_now" and not self._may_lead():
                return   # a stopping node takes no leadership handed over to it
            if self._prevote is not None and self._prevote.on_message(self._syncObj, node, message):
                return
        super()._onMessageReceived(node, message)

    def _refuse(self, conn, what: str) -> None:
        log.warning("raft: refused %s on an incoming connection", what)
        conn.send("FAIL refused")
        conn.disconnect()
        self._unknownConnections.discard(conn)

    def send(self, node, message):
        kind = message.get("type") if isinstance(message, dict) else None
        if kind in DURABLE_BEFORE_SEND and not self._failpoints.on("skip_sync_before_send"):
            self._journal.sync()
        if kind == "append_entries":
            self._replication.on_sent(node, message.get("entries"))
        sent = super().send(node, message)
        if kind == "next_node_idx" and sent and self._failpoints.on("crash_after_ack"):
            self._maybe_crash_after_ack(message)
        return sent

    def _maybe_crash_after_ack(self, message) -> None:
        acked = message["next_node_idx"] - 1
        if message["success"] and acked > self._journal.startup_last_idx:
            self._failpoints.crash(f"acked {acked}")


class _Waker:
    """Wakes the Raft thread from its poll when a proposal is queued (pysyncobj only does
    so with batching off), saving up to autoTickPeriod per proposal."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.closed = False

    def subscribe(self, poller) -> None:
        poller.subscribe(self._r, self._drain, POLL_EVENT_TYPE.READ)

    def _drain(self, _descr, _event) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 4096):
                pass

    def wake(self) -> None:
        if not self.closed:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._w, b"w")

    def close(self, poller) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            poller.unsubscribe(self._r)
        os.close(self._r)
        os.close(self._w)


def apply_budget_s(o: RaftOptions) -> float:
    return min(o.apply_budget_s, o.raft_min_timeout_s / 5, o.leader_fallback_timeout_s / 5)


def heartbeat_period_s(o: RaftOptions) -> float:
    """At most a tenth of the shortest election and leader-fallback timeouts: a follower
    hears several heartbeats before it would campaign, a leader several answers before it
    would step down (tests run with timeouts of 50 ms)."""
    return min(o.append_entries_period_s, o.raft_min_timeout_s / 10,
               o.leader_fallback_timeout_s / 10)


class _TimedPoller:
    """pysyncobj's poller, polled until the Raft thread's next timer rather than for a
    fixed `autoTickPeriod`: a leader's next heartbeat, a follower's or candidate's
    election deadline, bounded by [auto_tick_period_s, idle_tick_max_s] (the lower bound
    keeps a node that cannot campaign yet, its deadline passed, from spinning; the upper
    one keeps the per-tick checks (connection retries, the snapshot child, the watchdog's
    sign of life) going). Everything else that needs the thread is an event that ends the
    poll: a message, a writable socket, a proposal or task through `_Waker`."""

    def __init__(self, inner, obj, options: RaftOptions) -> None:
        self._inner, self._obj = inner, obj
        self._min_s, self._max_s = options.auto_tick_period_s, options.idle_tick_max_s

    @classmethod
    def install(cls, obj, options: RaftOptions) -> None:
        if obj is not None and not isinstance(obj._poller, cls):
            obj._poller = cls(obj._poller, obj, options)

    def wait_s(self) -> float:
        obj = self._obj
        if obj.cut:
            return 0.0     # committed entries left over from a cut apply slice
        if obj._SyncObj__raftState == 2:
            due = obj._SyncObj__newAppendEntriesTime
        else:
            due = obj._SyncObj__raftElectionDeadline
        return min(self._max_s, max(self._min_s, due - monotonicTime()))

    def poll(self, _timeout) -> None:
        self._inner.poll(self.wait_s())

    def subscribe(self, *args) -> None:
        self._inner.subscribe(*args)

    def unsubscribe(self, *args) -> None:
        self._inner.unsubscribe(*args)


# --- the replicated object ---------------------------------------------------------------

class _RaftObject(BoundedApply, WastelessAppendEntries, SyncObj):
    def __init__(self, replica: "Replica", self_node, peers, conf, transport_class):
        self._replica = replica
        self.replication = replica.replication
        self.apply_budget_s = apply_budget_s(replica.options)
        self._heartbeat_s = heartbeat_period_s(replica.options)
        self._tick_started_at: float | None = None
        self.stall_forgiven_s = 0.0     # leader: stalls not counted against its peers
        # The tick thread starts inside SyncObj.__init__ and may call back at once.
        replica._obj = self
        super().__init__(self_node, peers, conf, nodeClass=_DialNode,
                         transportClass=transport_class)

    def _onTick(self, timeToWait=0.0):
        # Hooks around pysyncobj's tick: the rejoin gate and a leader's stall before it,
        # the watchdog after.
        now = monotonicTime()
        if self._tick_started_at is not None:
            self.stall_forgiven_s += forgive_stall(self, now - self._tick_started_at,
                                                   self._heartbeat_s, now)
        self._tick_started_at = now
        self._replica._before_tick(self)
        try:
            super()._onTick(timeToWait)
        except Exception as exc:
            self._replica.watchdog.tick_failed(exc)
            raise
        self._replica.watchdog.tick_ok()

    @replicated
    def apply(self, blob):
        # The only replicated method (pysyncobj numbers them by name): never add another.
        self._replica._apply_blob(blob)


# --- snapshots ---------------------------------------------------------------------------

_fsync_dir = journal_mod.fsync_dir


def write_snapshot(path: Path, raft_data: list, state: bytes) -> Path:
    """Write and fsync `path`'s temp file; `publish_snapshot` renames it into place.

    Format 2: magic, header length, CRC32C of the header, header (msgpack: raft data,
    state length, CRC32C of the state), state. Format 1 (magic TSCHSNP1, a SHA-256 of the
    state and no header checksum) is still read."""
    header = msgpack.packb({"raft": raft_data, "state_len": len(state),
                            "state_crc32c": crc32c.crc32c(state)})
    tmp = snapshot_tmp_path(path)
    with open(tmp, "wb") as f:
        f.write(SNAPSHOT_MAGIC + _U32.pack(len(header)) + _U32.pack(crc32c.crc32c(header)))
        f.write(header)
        _write_synced(f, state)
        os.fsync(f.fileno())
    return tmp


# The snapshot child writes and syncs the state this much at a time. On ext4 a journal
# commit (the parent's Raft log fsync) waits for the data of blocks allocated in it: a
# state of hundreds of MB written in one piece held the log's fsync, and the heartbeats
# behind it, for as long as it took to write out (300 MB beside a loop of 4 KB fdatasyncs,
# quiet machine: those took up to 91-187 ms; synced every 8 MB, up to 16-19 ms).
SNAPSHOT_SYNC_BYTES = 8 << 20


def _write_synced(f, data: bytes) -> None:
    view = memoryview(data)
    for start in range(0, len(view), SNAPSHOT_SYNC_BYTES):
        f.write(view[start:start + SNAPSHOT_SYNC_BYTES])
        f.flush()
        os.fdatasync(f.fileno())


def snapshot_tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".fork.tmp")


def publish_snapshot(path: Path) -> None:
    """Atomic replace, then fsync the directory so that the rename itself is durable."""
    os.replace(snapshot_tmp_path(path), path)
    _fsync_dir(path.parent)


def _parse_snapshot_header(path: Path, data: bytes) -> tuple[dict, int]:
    """(header, offset of the state); raises CorruptStorage naming the file."""
    magic = data[:len(SNAPSHOT_MAGIC)]
    if magic not in (SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_V1):
        raise journal_mod.CorruptStorage(path, "snapshot header", "not a tsched snapshot")
    at = len(SNAPSHOT_MAGIC)
    try:
        (size,) = _U32.unpack_from(data, at)
        at += _U32.size
        if magic == SNAPSHOT_MAGIC:
            (crc,) = _U32.unpack_from(data, at)
            at += _U32.size
            if len(data) < at + size or crc32c.crc32c(data[at:at + size]) != crc:
                raise journal_mod.CorruptStorage(path, "snapshot header", "checksum mismatch")
        header = msgpack.unpackb(data[at:at + size])
        return header, at + size
    except (struct.error, ValueError, msgpack.UnpackException) as exc:
        raise journal_mod.CorruptStorage(path, "snapshot header", repr(exc)) from exc


def read_snapshot_header(path: Path) -> dict:
    """The header alone (a start reads it to trim the log), checked as `read_snapshot` does."""
    with open(path, "rb") as f:
        head = f.read(len(SNAPSHOT_MAGIC) + 2 * _U32.size)
        if len(head) < len(SNAPSHOT_MAGIC) + 2 * _U32.size:
            raise journal_mod.CorruptStorage(path, "snapshot header", "truncated")
        size = _U32.unpack_from(head, len(SNAPSHOT_MAGIC))[0]
        return _parse_snapshot_header(path, head + f.read(size))[0]


def read_snapshot(path: Path) -> tuple[list, bytes]:
    with open(path, "rb") as f:
        data = f.read()
    header, start = _parse_snapshot_header(path, data)
    state = data[start:]
    try:
        index = header["raft"][1][1]
        intact = len(state) == header["state_len"] and (
            crc32c.crc32c(state) == header["state_crc32c"] if "state_crc32c" in header
            else hashlib.sha256(state).hexdigest() == header["state_sha256"])
    except (KeyError, IndexError, TypeError) as exc:
        raise journal_mod.CorruptStorage(path, "snapshot header", repr(exc)) from exc
    if not intact:
        raise journal_mod.CorruptStorage(path, f"snapshot at log index {index}",
                                         "truncated or checksum mismatch")
    return header["raft"], state


def _entry(e) -> tuple[bytes, int, int]:
    return (bytes(e[0]), int(e[1]), int(e[2]))


# --- the replica -------------------------------------------------------------------------

class Replica:
    """One node's replica: owns the state machine, its lock, and the Raft object."""

    def __init__(self, *, self_id: str, self_raft: str, peers: dict[str, str], data_dir: Path,
                 secret: str | None = None, limits=None, options: RaftOptions = RaftOptions(),
                 failpoints: Failpoints | None = None, dial_overrides: dict[str, str] | None = None,
                 machine: MachineKit | None = None, clock_ms: Callable[[], int] | None = None):
        check_raft_security([self_raft, *peers.values()], secret)
        self.self_id = self_id
        self.self_raft = self_raft
        self.peers = dict(peers)
        self.data_dir = Path(data_dir)
        self.secret = secret
        self.options = options
        self.failpoints = failpoints or NO_FAILPOINTS
        self.dial_overrides = dict(dial_overrides or {})
        self._kit = machine if machine is not None else default_kit(limits)
        self._proposed = None if self._kit.as_batch is None else \
            ProposedBatches(self._kit.as_batch)
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._id_by_addr = {addr: nid for nid, addr in self.peers.items()}
        self._id_by_addr[self_raft] = self_id
        if len(self._id_by_addr) != len(self.peers) + 1:
            raise ValueError("every node needs its own Raft address")
        self._lock = threading.RLock()
        self._sm = self._kit.new()
        self._listeners: list[Callable] = []
        self._tick_tasks: collections.deque = collections.deque()
        self._view = _View()
        self._ready_term = -1
        self._barrier_rid: str | None = None
        self._snap_pid: int | None = None
        self._snap_abandoned = False
        self._snapshot_bytes: int | None = None   # last_snapshot_bytes, read lazily
        self._compacted_time_period = self._period_of(time.time(), options.compaction_min_time_s)
        self._last_sent_idx = 0
        self._last_sent_commit = 0
        self._waker: _Waker | None = None
        self._obj: _RaftObject | None = None
        self._journal: journal_mod.LmdbJournal | None = None
        self.snapshot_stalls_ms: list[float] = []
        self.snapshots_written = 0
        self.replication = ReplicationStats()
        self.rejoin = RejoinGate(self.data_dir)
        self.leaving = False             # stopping: campaigns for nothing (handoff.py)
        self.prevote = PreVote(min_timeout_s=options.raft_min_timeout_s,
                               may_vote=self.rejoin.may_vote) if options.pre_vote else None
        self.watchdog = Watchdog(stall_ready_s=options.raft_max_timeout_s,
                                 stall_exit_s=options.watchdog_stall_exit_s,
                                 tick_failures_max=options.watchdog_tick_failures_max,
                                 late_tick_s=LATE_TICK_SHARE * options.raft_min_timeout_s)

    @classmethod
    def from_config(cls, cluster, node_id: str, failpoints: Failpoints | None = None,
                    options: RaftOptions | None = None, **kwargs) -> "Replica":
        """From `config.ClusterConfig`: its node, peers, secret, timeouts and compaction."""
        node = cluster.node(node_id)
        t = dict(getattr(cluster, "timeouts", None) or {})
        opts = options or RaftOptions()
        mapping = {"raft_min_s": "raft_min_timeout_s", "raft_max_s": "raft_max_timeout_s",
                   "leader_fallback_s": "leader_fallback_timeout_s"}
        overrides = {mapping[k]: float(v) for k, v in t.items() if k in mapping}
        compaction = dict(getattr(cluster, "compaction", None) or {})
        if "min_entries" in compaction:
            overrides["compaction_min_entries"] = int(compaction["min_entries"])
        if "min_time_s" in compaction:
            overrides["compaction_min_time_s"] = float(compaction["min_time_s"])
        if "min_bytes" in compaction:
            overrides["compaction_min_bytes"] = int(compaction["min_bytes"])
        if overrides:
            opts = dataclasses.replace(opts, **overrides)
        return cls(self_id=node_id, self_raft=node.raft, peers=cluster.peers_of(node_id),
                   data_dir=Path(node.data_dir), secret=cluster.secret, options=opts,
                   failpoints=failpoints, **kwargs)

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def snapshot_path(self) -> Path:
        return self.data_dir / "snapshot.bin"

    @property
    def journal_path(self) -> Path:
        return self.data_dir / "raft-log"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        trim = None
        if self.snapshot_path.exists():
            trim = int(read_snapshot_header(self.snapshot_path)["raft"][1][1])
        self._journal = journal_mod.LmdbJournal(self.journal_path, fsync=self.options.fsync,
                                                trim_before_idx=trim)
        journal_mod.prepare(str(self.journal_path), self._journal)
        transport = functools.partial(_GuardedTransport, journal=self._journal,
                                      failpoints=self.failpoints,
                                      message_bytes_max=self.options.message_bytes_max,
                                      replication=self.replication,
                                      gate=self.rejoin, prevote=self.prevote,
                                      may_lead=lambda: not self.leaving)
        peers = [_DialNode(addr, self.dial_overrides.get(addr)) for addr in self.peers.values()]
        self_node = _DialNode(self.self_raft)
        self._obj = _RaftObject(self, self_node, peers, self._conf(), transport)
        self._waker = _Waker()
        self._tick_tasks.append(lambda: self._waker.subscribe(self._obj._poller))
        self._tick_tasks.append(lambda: _TimedPoller.install(self._obj, self.options))
        self._obj.addOnTickCallback(self._on_tick)
        self.watchdog.start()
        try:
            self._obj.waitBinded()
        except Exception as exc:
            self.stop()                    # ends the tick thread, closes the journal
            raise OSError(f"cannot bind the Raft address {self.self_raft}: {exc!r}") from exc

    def _conf(self) -> SyncObjConf:
        o = self.options
        return SyncObjConf(
            password=self.secret,
            autoTickPeriod=o.auto_tick_period_s,
            appendEntriesPeriod=heartbeat_period_s(o),
            raftMinTimeout=o.raft_min_timeout_s,
            raftMaxTimeout=o.raft_max_timeout_s,
            leaderFallbackTimeout=o.leader_fallback_timeout_s,
            connectionRetryTime=o.connection_retry_s,
            connectionTimeout=max(o.connection_timeout_s, o.raft_max_timeout_s),
            commandsWaitLeader=False,
            commandsQueueSize=o.commands_queue_max,
            bindAddress=self.self_raft,
            bindRetryTime=o.bind_retry_s,
            maxBindRetries=o.bind_retries_max,
            journalFile=str(self.journal_path),
            fullDumpFile=str(self.snapshot_path),
            serializer=self._serialize,
            deserializer=self._deserialize,
            serializeChecker=self._check_serializing,
            # `_compact_when_due` decides every compaction (pysyncobj's own triggers by
            # entry count and age fired on every replica at the same index or second).
            logCompactionMinEntries=COMPACTION_NEVER,
            logCompactionMinTime=COMPACTION_NEVER,
            logCompactionBatchSize=o.snapshot_chunk_bytes,
            appendEntriesBatchSizeBytes=o.append_entries_batch_bytes,
            sendBufferSize=o.socket_buffer_bytes,
            recvBufferSize=o.socket_buffer_bytes,
            dynamicMembershipChange=False,
            onStateChanged=self._on_state_changed,
        )

    def stop(self) -> None:
        self.watchdog.stop()
        obj, self._obj = self._obj, None
        if obj is not None:
            obj.destroy_synchronous()      # closes the transport and the journal
            if self._waker is not None:
                self._waker.close(obj._poller)
                self._waker = None
        self._abandon_snapshot_child()     # an unpublished snapshot is simply not taken

    # --- reads ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def read(self):
        with self._lock:
            yield self._sm

    @property
    def applied_seq(self) -> int:
        return self._sm.seq

    @property
    def apply_slices_cut(self) -> int:
        """Ticks that stopped applying at `apply_budget_s` with entries left (apply_budget.py)."""
        obj = self._obj
        return obj.slices_cut if obj is not None else 0

    @property
    def term(self) -> int:
        return self._view.term

    @property
    def commit_index(self) -> int:
        return self._view.commit_index

    @property
    def raft_applied_index(self) -> int:
        """The Raft log index last applied (sampled each tick), to compare with commit_index."""
        return self._view.last_applied

    def digest(self) -> str:
        with self._lock:
            return self._sm.digest()

    def leader_id(self) -> str | None:
        """The leader this node can reach, or None (cut off, or the leader lost quorum)."""
        v = self._view
        if v.leader is None or not v.has_quorum:
            return None
        if v.role == 2:
            return self.self_id
        if v.leader not in v.connected:
            return None
        return self._id_by_addr.get(v.leader)

    def unhealthy_reason(self) -> str | None:
        """Why this node must not serve at all (watchdog.py), or None."""
        return self.watchdog.reason()

    def leader_committed_in_its_term(self) -> bool:
        """The commit index holds an entry of the current term: the leader of this term
        has committed its barrier (a new leader commits nothing before one)."""
        v = self._view
        return v.commit_term == v.term and v.term > 0

    @property
    def connected_peers(self) -> list[str]:
        """Ids of the peers with a live Raft connection (sampled each tick)."""
        return sorted(self._id_by_addr[a] for a in self._view.connected if a in self._id_by_addr)

    def is_leader_role(self) -> bool:
        """Raft's own view (sampled each tick), whatever the quorum."""
        return self._view.role == 2

    def is_ready_leader(self) -> bool:
        v = self._view
        return v.role == 2 and v.has_quorum and self._ready_term == v.term

    def status(self) -> dict:
        v = self._view
        with self._lock:
            applied, digest = self._sm.seq, self._sm.digest()
        return {
            "id": self.self_id, "raft": self.self_raft, "role": _ROLE_NAMES[v.role],
            "term": v.term, "leader": self.leader_id(), "commit_index": v.commit_index,
            "applied_seq": applied, "digest": digest, "ready": self.is_ready_leader(),
            "peers": {nid: {"raft": addr, "reachable": addr in v.connected}
                      for nid, addr in sorted(self.peers.items())},
        }

    # --- writes --------------------------------------------------------------------------

    def add_apply_listener(self, fn: Callable[[int, list, list], None]) -> None:
        """fn(seq, cmds, results): on the Raft thread, under the lock, after each batch."""
        self._listeners.append(fn)

    def encode_batch(self, cmds: list) -> bytes:
        return self._kit.encode_batch(cmds)

    def propose_blob(self, blob: bytes, on_error: Callable[[str], None] | None = None,
                     cmds: list | None = None) -> None:
        """Hand one encoded batch to Raft without waiting. `on_error(reason)` is called (on
        the Raft thread) when pysyncobj reports a failure: the entry may or may not commit,
        except for "missing_leader" / "queue_full" / "not_leader" (it never entered a log
        of this term through this call). `cmds`: the commands `blob` encodes, applied
        as they are if this replica applies exactly these bytes (proposed.py)."""
        if len(blob) > self.options.entry_bytes_max:
            raise ValueError(f"batch of {len(blob)} bytes exceeds {self.options.entry_bytes_max}")
        obj = self._obj
        if obj is None:
            raise RuntimeError("replica is not started")

        def done(_res, err):
            if err != FAIL_REASON.SUCCESS and on_error is not None:
                on_error(_FAIL_NAMES.get(err, str(err)))

        if cmds is not None and self._proposed is not None:
            self._proposed.keep(blob, cmds)
        obj.apply(blob, callback=done)
        if self._waker is not None:
            self._waker.wake()

    def transfer_leadership(self, to: str | None = None) -> None:
        """Ask the leader to hand over to `to` (or the most caught-up peer). Best effort."""
        if to is not None and to not in self.peers:
            raise ValueError(f"unknown or self node {to!r}")
        addr = self.peers[to] if to is not None else None

        def run():
            obj = self._obj
            if obj is not None:
                node = _DialNode(addr, self.dial_overrides.get(addr)) if addr else None
                obj.transferLeadership(node, callback=None)

        self._tick_tasks.append(run)
        if self._waker is not None:
            self._waker.wake()

    def force_snapshot(self) -> None:
        if self._obj is not None:
            self._obj.forceLogCompaction()

    # --- the Raft thread -----------------------------------------------------------------

    def _apply_blob(self, blob: bytes) -> None:
        self.watchdog.progress()   # a long catch-up tick is work, not a stall
        cmds = None if self._proposed is None else self._proposed.take(blob)
        try:
            if cmds is None:
                cmds = self._kit.decode_batch(blob)
        except Exception as exc:  # a junk blob decodes the same everywhere: skip it
            log.error("raft: skipped an undecodable entry of %d bytes: %r", len(blob), exc)
            return
        with self._lock:
            try:
                results = self._sm.apply_batch(cmds)
            except BaseException:
                log.critical("state machine raised while applying a batch: stopping rather "
                             "than diverging", exc_info=True)
                logging.shutdown()
                os._exit(STATE_MACHINE_BUG_EXIT_CODE)
            seq = self._sm.seq
            self._note_barrier(cmds)
            for fn in self._listeners:
                try:
                    fn(seq, cmds, results)
                except Exception:
                    log.exception("apply listener failed")

    def _note_barrier(self, cmds) -> None:
        rid = self._barrier_rid
        if rid is not None and any(getattr(c, "request_id", None) == rid for c in cmds):
            self._ready_term = int(rid.rsplit(":", 1)[1])

    def _on_state_changed(self, old, new) -> None:
        obj = self._obj                  # None once stop() began
        if new == 2 and obj is not None:
            self.replication.on_leadership()
            self._propose_barrier(obj.raftCurrentTerm)

    def _propose_barrier(self, term: int) -> None:
        obj = self._obj
        if obj is None or not obj._isLeader() or obj.raftCurrentTerm != term:
            return
        rid = f"barrier:{self.self_id}:{term}"
        self._barrier_rid = rid
        blob = self._kit.encode_batch([self._kit.barrier(rid, self._clock_ms())])

        def done(_res, err):
            if err != FAIL_REASON.SUCCESS:
                self._propose_barrier(term)

        obj.apply(blob, callback=done)

    def _before_tick(self, obj) -> None:
        """A node rejoining empty starts no election (and ends that once caught up); any
        other asks for a pre-vote before it campaigns."""
        if self.rejoin.rejoining or self.leaving:
            obj._SyncObj__raftElectionDeadline = monotonicTime() + self.options.raft_max_timeout_s
            self.rejoin.check_caught_up(obj)
        elif self.prevote is not None:
            self.prevote.before_tick(obj)

    def _on_tick(self) -> None:
        while self._tick_tasks:
            self._tick_tasks.popleft()()
        obj = self._obj
        if obj is None:
            return
        self._send_new_entries_now(obj)
        peers = obj.otherNodes
        leader = obj._getLeader()
        self._view = _View(
            role=obj._SyncObj__raftState,
            term=obj.raftCurrentTerm,
            leader=leader.id if leader is not None else None,
            has_quorum=obj.hasQuorum,
            connected=frozenset(n.id for n in peers if obj.isNodeConnected(n)),
            commit_index=obj.raftCommitIndex,
            last_applied=obj.raftLastApplied,
            commit_term=self._term_at(obj.raftCommitIndex),
        )
        self._compact_when_due(obj)

    def _term_at(self, idx: int) -> int:
        journal = self._journal
        if journal is None or not len(journal):
            return 0
        pos = idx - journal[0][1]
        return journal[pos][2] if 0 <= pos < len(journal) else 0

    def _compact_when_due(self, obj) -> None:
        """Compact once the applied log passes this node's byte threshold, or its entry
        count or age enters this node's next period (`_period_of`). pysyncobj compacts by
        entry count and age alone, at the same index on every replica."""
        journal = self._journal
        if journal is None or self._snap_pid is not None or not len(journal):
            return
        o = self.options
        applied = obj.raftLastApplied
        time_period = self._period_of(time.time(), o.compaction_min_time_s)
        if (journal.applied_bytes(applied) >= self.compaction_bytes
                # pysyncobj snapshots at the entry before the last applied one and keeps
                # that entry first in the log: the log began in the period of the next.
                or self._period_of(applied, o.compaction_min_entries)
                > self._period_of(journal[0][1] + 1, o.compaction_min_entries)
                or time_period > self._compacted_time_period):
            self._compacted_time_period = time_period
            obj.forceLogCompaction()

    @functools.cached_property
    def compaction_phase(self) -> float:
        """This node's place among the cluster's ids, as a share in [0, 0.5). Replicas apply
        the same log, so equal thresholds had every node fork and write its snapshot at the
        same moment: the three children and the copy-on-write faults of their parents
        starved a 2-core machine at once (at 1,000,000 tasks for seconds; at 20,000 entries
        every task due in the next 2 s was handed out 40-113 ms late)."""
        ids = sorted([self.self_id, *self.peers])
        return ids.index(self.self_id) / (2 * len(ids))

    def _period_of(self, value: float, period: float) -> int:
        """Which of this node's periods a log index or a wall-clock second is in: a new
        period means a snapshot is due. Periods are offset by `compaction_phase`, so
        replicas compact `period` apart, never at an index or second another one uses."""
        return int((value + period * self.compaction_phase) // period)

    @property
    def compaction_bytes(self) -> int:
        """This node's share of `compaction_min_bytes`: between a half and all of it, by
        its `compaction_phase`."""
        proportional = self.last_snapshot_bytes * self.options.compaction_log_to_snapshot_ratio
        return int(max(self.options.compaction_min_bytes, proportional)
                   * (1 - self.compaction_phase))

    @property
    def last_snapshot_bytes(self) -> int:
        """The size of the newest snapshot file (0 without one): written here, received
        from the leader, or found at start. Read once per new snapshot, not per tick."""
        if self._snapshot_bytes is None:
            try:
                self._snapshot_bytes = self.snapshot_path.stat().st_size
            except OSError:
                self._snapshot_bytes = 0
        return self._snapshot_bytes

    def _send_new_entries_now(self, obj) -> None:
        """A leader sends entries added in this tick at once (one group commit for all of
        them) instead of at the next heartbeat: pysyncobj does so only with batching off,
        which costs one fsync per entry. Saves up to appendEntriesPeriod per proposal.
        Likewise when the commit index moved: followers then apply (and answer the writes
        they forwarded) without waiting for the next heartbeat."""
        if obj._SyncObj__raftState != 2:
            return
        last = self._journal[-1][1] if self._journal is not None and len(self._journal) else 0
        commit = obj.raftCommitIndex
        if last > self._last_sent_idx or commit > self._last_sent_commit:
            self._last_sent_idx = max(self._last_sent_idx, last)
            self._last_sent_commit = commit
            obj._SyncObj__sendAppendEntries()

    # --- snapshots (pysyncobj serializer hooks, Raft thread) ------------------------------

    def _serialize(self, _tmp_name: str, data) -> None:
        """Fork: the child writes and fsyncs the snapshot; the Raft thread pays only for the
        fork, and later renames the finished file into place (`_check_serializing`), so a
        snapshot installed from the leader meanwhile is never overwritten by an older one.

        pysyncobj then tries to rename its own temp file, which does not exist; that
        failure is expected and ignored because `_check_serializing` reports the outcome."""
        last, prev, cluster = data
        raft_data = [list(last), list(prev), sorted(n.id for n in cluster)]
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 1
            gc.disable()   # a short-lived child: collections would only walk the state
            try:
                os.nice(self.options.snapshot_child_nice)
                write_snapshot(self.snapshot_path, raft_data, self._sm.snapshot())
                code = 0
            finally:
                os._exit(code)
        self._snap_pid = pid
        stall_ms = (time.perf_counter() - started) * 1000
        self.snapshot_stalls_ms.append(stall_ms)
        log.info("raft: snapshot at index %d forked (Raft thread stalled %.1f ms)", prev[1], stall_ms)

    def _check_serializing(self):
        self._unblock_snapshot_sending()
        if self._snap_abandoned:
            self._snap_abandoned = False
            return SERIALIZER_STATE.FAILED      # lets pysyncobj start the next one
        if self._snap_pid is None:
            return SERIALIZER_STATE.NOT_SERIALIZING
        status = self._reap_snapshot_child(block=False)
        if status is None:
            return SERIALIZER_STATE.SERIALIZING
        if status != 0:
            log.error("raft: snapshot child failed (wait status %d)", status)
            return SERIALIZER_STATE.FAILED
        try:
            publish_snapshot(self.snapshot_path)
            self._snapshot_bytes = None
        except OSError as exc:
            log.error("raft: could not publish the snapshot: %r", exc)
            return SERIALIZER_STATE.FAILED
        self.snapshots_written += 1
        return SERIALIZER_STATE.SUCCESS

    def _unblock_snapshot_sending(self) -> None:
        """pysyncobj's Serializer, after calling `_serialize`, fails to rename a temp file
        of its own and marks itself busy (pid -2) until the checker reports an outcome; while
        busy it sends no snapshot to a follower that needs one. A follower catching up at
        1,000,000 tasks thus waited for a whole snapshot to be written (tens of seconds)
        before its transfer even started. Ours are written by our own child and published
        by an atomic rename, so the snapshot file is always complete: let it be sent."""
        serializer = getattr(self._obj, "_SyncObj__serializer", None)
        if serializer is not None:
            serializer._Serializer__pid = 0

    def _abandon_snapshot_child(self) -> None:
        if self._snap_pid is None:
            return
        try:
            os.kill(self._snap_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap_snapshot_child(block=True)
        self._snap_abandoned = True
        with contextlib.suppress(FileNotFoundError):
            snapshot_tmp_path(self.snapshot_path).unlink()

    def _reap_snapshot_child(self, block: bool) -> int | None:
        pid = self._snap_pid
        if pid is None:
            return None
        rpid, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        if rpid == 0:
            return None
        self._snap_pid = None
        return status

    def _restore_frozen(self, state: bytes):
        """Restore with collections paused, and move the restored state out of the cyclic
        GC's walks (`GcPolicy.after_restore`) before they resume: otherwise the first young
        collection walks every restored object (about a second at 1,000,000 tasks, before
        the node serves its first read). A state installed over one that has applied
        commands is swapped in first, then everything is unfrozen and collected once: the
        old state's reference cycles (the machine and its handlers) would never be
        reclaimed while frozen, and GcPolicy freezes the survivors of full collections."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            sm = self._kit.restore(state)
            if getattr(self._sm, "seq", 0):
                with self._lock:
                    old, self._sm = self._sm, sm
                del old
                gc.unfreeze()
                gc.collect()
            GcPolicy.after_restore()
            return sm
        finally:
            if enabled:
                gc.enable()

    def _deserialize(self, file_name: str):
        """Restore the state machine from a snapshot (ours, or one received from the leader:
        pysyncobj renamed that into place without fsync, so make it durable first)."""
        path = Path(file_name)
        self._abandon_snapshot_child()   # it holds an older state than this file
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(path.parent)
            self._snapshot_bytes = None
            started = time.perf_counter()
            with self.watchdog.busy("restoring a snapshot"):
                raft_data, state = read_snapshot(path)
                sm = self._restore_frozen(state)
            log.info("raft: snapshot at index %d restored in %.2f s (%d bytes)",
                     raft_data[1][1], time.perf_counter() - started, len(state))
        except journal_mod.CorruptStorage as exc:
            self.watchdog.mark_fatal(str(exc))
            journal_mod.fatal_corruption(exc)
        except Exception as exc:
            # pysyncobj would log this and carry on with an empty state: never do that.
            journal_mod.fatal_storage_error(f"loading snapshot {path}", exc)
        with self._lock:
            self._sm = sm
        del sm
        last, prev, cluster = raft_data
        return _entry(last), _entry(prev), set(cluster)

