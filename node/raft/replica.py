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
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable, NamedTuple

from pysyncobj import FAIL_REASON, SyncObjConf
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.monotonic import monotonic as monotonicTime

from tsched.node.raft import journal as journal_mod
from tsched.node.raft.prevote import PreVote
from tsched.node.raft.proposed import ProposedBatches
from tsched.node.raft.rejoin import RejoinGate
from tsched.node.raft.watchdog import LATE_TICK_SHARE, Watchdog
from tsched.node.failpoints import NONE as NO_FAILPOINTS
from tsched.node.failpoints import Failpoints
from tsched.node.ops.gcpolicy import GcPolicy
from tsched.node.raft.machine_kit import MachineKit, default_kit
from tsched.node.raft.options import COMPACTION_NEVER, RaftOptions, heartbeat_period_s
from tsched.node.raft.poller import TimedPoller, Waker
from tsched.node.raft.raft_object import RaftObject
from tsched.node.raft.replication import ReplicationStats
from tsched.node.raft.security import check_raft_security
from tsched.node.raft.snapshot_file import (publish_snapshot, read_snapshot, read_snapshot_header,
                                            snapshot_tmp_path, write_snapshot)
from tsched.node.raft.transport import DialNode, GuardedTransport

log = logging.getLogger(__name__)


STATE_MACHINE_BUG_EXIT_CODE = 70
_FAIL_NAMES = {v: k.lower() for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}
_ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}


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


def _entry(e) -> tuple[bytes, int, int]:
    return (bytes(e[0]), int(e[1]), int(e[2]))


# --- the replica -------------------------------------------------------------------------

class Replica:
    """One node's replica: owns the state machine, its lock, and the Raft object."""

    def __init__(self, *, self_id: str, self_raft: str, peers: dict[str, str], data_dir: Path,
                 secret: str | None = None, limits=None, options: RaftOptions | None = None,
                 failpoints: Failpoints | None = None, dial_overrides: dict[str, str] | None = None,
                 machine: MachineKit | None = None, clock_ms: Callable[[], int] | None = None):
        check_raft_security([self_raft, *peers.values()], secret)
        options = options if options is not None else RaftOptions()
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
        self._waker: Waker | None = None
        self._obj: RaftObject | None = None
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
        transport = functools.partial(GuardedTransport, journal=self._journal,
                                      failpoints=self.failpoints,
                                      message_bytes_max=self.options.message_bytes_max,
                                      replication=self.replication,
                                      gate=self.rejoin, prevote=self.prevote,
                                      may_lead=lambda: not self.leaving)
        peers = [DialNode(addr, self.dial_overrides.get(addr)) for addr in self.peers.values()]
        self_node = DialNode(self.self_raft)
        self._obj = RaftObject(self, self_node, peers, self._conf(), transport)
        self._waker = Waker()
        self._tick_tasks.append(lambda: self._waker.subscribe(self._obj._poller))
        self._tick_tasks.append(lambda: TimedPoller.install(self._obj, self.options))
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
                node = DialNode(addr, self.dial_overrides.get(addr)) if addr else None
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
            journal_mod.fsync_dir(path.parent)
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

