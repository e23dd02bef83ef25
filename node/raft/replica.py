"""`Replica`: the state machine replicated by Raft (pysyncobj), the only pysyncobj user.

DESIGN.md sections 3, 4 and 6 list what this module guards against:
- exactly one `@replicated` method, `apply(blob)`, which never raises;
- the log in LMDB (`journal.py`), made durable by one group commit before any vote or
  replication message leaves the node (`transport.GuardedTransport.send`);
- snapshots written by a forked child, so the Raft thread stalls only for the fork
  (`snapshot_writer.py`), and compacted in each node's own phase (`compaction.py`);
- leadership that accounts for quorum and the leader's connection, and a barrier entry per
  term before a new leader calls itself ready (`barrier.py`);
- a Raft port bound to its configured address, refused admin messages, bounded messages
  (`transport.py`), and no non-loopback address without a secret (`security.py`).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from pysyncobj import FAIL_REASON, SyncObjConf
from pysyncobj.node import Node

from tsched.statemachine import Limits, StateMachine

from tsched.node.failpoints import NONE as NO_FAILPOINTS
from tsched.node.failpoints import Failpoints
from tsched.node.raft import journal as journal_mod
from tsched.node.raft import journal_hook, snapshot_loader
from tsched.node.raft.applied_index import AppliedIndexWatcher
from tsched.node.raft.barrier import TermBarrier
from tsched.node.config import ClusterConfig
from tsched.node.raft.compaction import CompactionPolicy, compaction_phase
from tsched.node.raft.machine_kit import MachineKit, default_kit
from tsched.node.raft.membership import Member, Membership
from tsched.node.raft.options import RaftOptions, options_from_cluster, sync_obj_conf
from tsched.node.raft.poller import TimedPoller, Waker
from tsched.node.raft.prevote import PreVote
from tsched.node.raft.pending_proposals import ProposedBatches
from tsched.node.raft.raft_object import RaftObject
from tsched.node.raft.rejoin import RejoinGate
from tsched.node.raft.replication import ReplicationStats
from tsched.node.raft.security import check_raft_security
from tsched.node.raft.snapshot_file import snapshot_index
from tsched.node.raft.snapshot_writer import SnapshotWriter
from tsched.node.raft.syncobj_adapter import (
    Entry, current_log_index, other_nodes, transport_of)
from tsched.node.raft.transport import DialNode, GuardedTransport, Refusals
from tsched.node.raft.view import ROLE_NAMES, View
from tsched.node.raft.watchdog import Watchdog

log = logging.getLogger(__name__)


STATE_MACHINE_BUG_EXIT_CODE = 70
_FAIL_NAMES = {v: k.lower() for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}

class Replica:
    """One node's replica: owns the state machine, its lock, and the Raft object."""

    def __init__(self, *, self_id: str, self_raft: str, peers: dict[str, str], data_dir: Path,
                 secret: str | None = None, limits: Limits | None = None, options: RaftOptions | None = None,
                 failpoints: Failpoints | None = None, dial_overrides: dict[str, str] | None = None,
                 machine: MachineKit | None = None, clock_ms: Callable[[], int] | None = None,
                 http_of: dict[str, str] | None = None) -> None:
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
        self._proposed = ProposedBatches(self._kit.as_batch) if self._kit.as_batch else None
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._id_by_addr = {addr: nid for nid, addr in self.peers.items()}
        self._id_by_addr[self_raft] = self_id
        if len(self._id_by_addr) != len(self.peers) + 1:
            raise ValueError("every node needs its own Raft address")
        self.membership = Membership.of(self.data_dir, self_id, self_raft, self.peers, http_of or {})
        self._lock = threading.RLock()
        self._sm = self._kit.new()
        self._listeners: list[Callable[[int, list, list], None]] = []
        self._tick_tasks: collections.deque[Callable[[], None]] = collections.deque()
        self._view = View()
        self.applied_index = AppliedIndexWatcher()   # `catch_up` (read-your-writes for claims)
        self._barrier = TermBarrier(self_id, self._kit, self._clock_ms, lambda: self._obj)
        self._snapshots = SnapshotWriter(self.snapshot_path, options.snapshot_child_nice)
        self._compaction = CompactionPolicy(options, compaction_phase(self_id, self.peers),
                                            time.time())
        self._waker: Waker | None = None
        self._obj: RaftObject | None = None
        self._journal: journal_mod.LmdbJournal | None = None
        self.replication = ReplicationStats()
        self.refusals = Refusals()       # peers refusing this node as not a member
        self.rejoin = RejoinGate(self.data_dir)
        self.leaving = False             # stopping: campaigns for nothing (handoff.py)
        self.prevote = PreVote(min_timeout_s=options.raft_min_timeout_s,
                               may_vote=self.rejoin.may_vote) if options.pre_vote else None
        self.watchdog = Watchdog.for_options(options)

    @classmethod
    def from_config(cls, cluster: ClusterConfig, node_id: str, **kwargs: Any) -> Replica:
        """From `config.ClusterConfig`: its node, peers, secret, timeouts and compaction.
        `kwargs`: `Replica`'s other keyword arguments, checked there (untyped: callers
        build them as dicts); `options`, if given, is the base the cluster's settings go over."""
        node = cluster.node(node_id)
        options = options_from_cluster(cluster, kwargs.pop("options", None))
        return cls(self_id=node_id, self_raft=node.raft, peers=cluster.peers_of(node_id),
                   data_dir=Path(node.data_dir), secret=cluster.secret,
                   http_of={n.id: n.api or n.http for n in cluster.nodes},
                   options=options, **kwargs)

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def snapshot_path(self) -> Path:
        return self.data_dir / "snapshot.bin"

    @property
    def journal_path(self) -> Path:
        return self.data_dir / "raft-log"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # A crash may have left log entries that the snapshot covers: trimmed first.
        trim = snapshot_index(self.snapshot_path)
        self._journal = journal_mod.LmdbJournal(self.journal_path, fsync=self.options.fsync,
                                                trim_before_idx=trim)
        self._journal.stall_path = _stall_path(self.failpoints)
        journal_hook.prepare(str(self.journal_path), self._journal)
        transport = functools.partial(GuardedTransport, journal=self._journal,
                                      failpoints=self.failpoints,
                                      message_bytes_max=self.options.message_bytes_max,
                                      replication=self.replication,
                                      gate=self.rejoin, prevote=self.prevote,
                                      may_lead=lambda: not self.leaving,
                                      dial_of=self.dial_overrides.get,
                                      refusals=self.refusals)
        self.membership.replaying(self._journal)
        peers = [self._dial_node(m) for m in self.membership.members if m.raft != self.self_raft]
        self_node = self._dial_node(self.membership.self_member)
        obj = RaftObject(self, self_node, peers, self._conf(), transport)
        self._waker = Waker()
        self._journal.on_durable = self._waker.wake    # own_durability.py, DeferredAcks
        self._tick_tasks.append(self._subscribe_waker)
        self._tick_tasks.append(lambda: TimedPoller.install(self._obj, self.options))
        obj.addOnTickCallback(self._on_tick)
        self.watchdog.start()
        try:
            obj.waitBinded()
        except Exception as exc:
            self.stop()                    # ends the tick thread, closes the journal
            raise OSError(f"cannot bind the Raft address {self.self_raft}: {exc!r}") from exc

    def _subscribe_waker(self) -> None:
        # On the Raft thread: pysyncobj's poller is not shared with other threads.
        obj, waker = self._obj, self._waker
        if obj is not None and waker is not None:
            waker.subscribe(obj._poller)

    def adopt(self, obj: RaftObject) -> None:
        """The RaftObject being built holds this replica's state (raft_object.RaftHost)."""
        self._obj = obj

    def _dial_node(self, m: Member) -> DialNode:
        return DialNode(m.raft, self.dial_overrides.get(m.raft), name=m.id, http=m.http)

    def _conf(self) -> SyncObjConf:
        """pysyncobj's configuration, with this replica's hooks (options.py)."""
        return sync_obj_conf(
            self.options, password=self.secret, bind_address=self.self_raft,
            journal_file=str(self.journal_path), snapshot_file=str(self.snapshot_path),
            serializer=self._serialize, deserializer=self._deserialize,
            serialize_checker=self._check_serializing, on_state_changed=self._on_state_changed)

    def stop(self) -> None:
        self.watchdog.stop()
        obj, self._obj = self._obj, None
        if obj is not None:
            obj.destroy_synchronous()      # closes the transport and the journal
            if self._waker is not None:
                self._waker.close(obj._poller)
                self._waker = None
        self._snapshots.abandon()          # an unpublished snapshot is simply not taken

    # --- reads ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def read(self) -> Iterator[StateMachine]:
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

    def not_a_member_reason(self) -> str | None:
        """Why this node believes it is no longer a member, or None: it sees no leader and
        more than half of its peers refused its Raft connection lately as not a member
        there (the cluster removed it; a joining node's peers name it within moments)."""
        if self.leader_id() is not None:
            return None
        refused = [self._id_by_addr.get(r, r) for r in self.refusals.recent()]
        peers = len(self.peers)
        if not peers or 2 * len(refused) <= peers:
            return None
        return (f"this node is not a member of the cluster: {', '.join(sorted(refused))} refuse "
                "it as not a member: it was removed (or, joining, is not added yet); a removed "
                "node cannot rejoin with its old data: start a new node with an empty data "
                "dir and --join")

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
        return v.role == 2 and v.has_quorum and self._barrier.ready_term == v.term

    def status(self) -> dict[str, object]:
        v = self._view
        with self._lock:
            applied, digest = self._sm.seq, self._sm.digest()
        return {
            "id": self.self_id, "raft": self.self_raft, "role": ROLE_NAMES[v.role],
            "term": v.term, "leader": self.leader_id(), "commit_index": v.commit_index,
            "applied_seq": applied, "digest": digest, "ready": self.is_ready_leader(),
            "peers": {nid: {"raft": addr, "reachable": addr in v.connected}
                      for nid, addr in sorted(self.peers.items())},
        }

    # --- compaction and snapshot figures (metrics) ------------------------------------------

    @property
    def compaction_phase(self) -> float:
        """This node's place among the cluster's ids, as a share in [0, 0.5) (compaction.py)."""
        return self._compaction.phase

    @property
    def compaction_bytes(self) -> int:
        """This node's share of `compaction_min_bytes` (compaction.py)."""
        return self._compaction.bytes_threshold(self._snapshots.file_bytes)

    @property
    def snapshot_stalls_ms(self) -> list[float]:
        """The Raft thread's stall for each snapshot fork."""
        return self._snapshots.stalls_ms

    @property
    def snapshots_written(self) -> int:
        return self._snapshots.written

    # --- writes --------------------------------------------------------------------------

    def add_apply_listener(self, fn: Callable[[int, list, list], None]) -> None:
        """fn(seq, cmds, results): on the Raft thread, under the lock, after each batch."""
        self._listeners.append(fn)

    def encode_batch(self, cmds: list) -> bytes:
        return self._kit.encode_batch(cmds)

    def propose_blob(self, blob: bytes, on_error: Callable[[str], object] | None = None,
                     cmds: list | None = None) -> None:
        """Hand one encoded batch to Raft without waiting. `on_error(reason)` is called (on
        the Raft thread) when pysyncobj reports a failure: the entry may or may not commit,
        except for "missing_leader" / "queue_full" / "not_leader" (it never entered a log
        of this term through this call). `cmds`: the commands `blob` encodes, applied
        as they are if this replica applies exactly these bytes (pending_proposals.py)."""
        if len(blob) > self.options.entry_bytes_max:
            raise ValueError(f"batch of {len(blob)} bytes exceeds {self.options.entry_bytes_max}")
        obj = self._obj
        if obj is None:
            raise RuntimeError("replica is not started")

        def done(_res: object, err: int) -> None:
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

        def run() -> None:
            obj = self._obj
            if obj is not None:
                node = DialNode(addr, self.dial_overrides.get(addr)) if addr else None
                obj.transferLeadership(node, callback=None)

        self._tick_tasks.append(run)
        if self._waker is not None:
            self._waker.wake()

    def change_membership(self, kind: str, member: Member, done: Callable[[str], None]) -> None:
        """The leader adds ("add") or removes ("rem") `member` (membership.Membership.propose)."""
        self._tick_tasks.append(lambda: self.membership.propose(self._obj, self._journal,
                                                                kind, member, done))
        if self._waker is not None:
            self._waker.wake()

    def force_snapshot(self) -> None:
        if self._obj is not None:
            self._obj.forceLogCompaction()

    # --- the Raft thread -----------------------------------------------------------------

    def apply_blob(self, blob: bytes) -> None:
        """Apply one committed batch (RaftObject.apply, the Raft thread); never raises."""
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
            self._barrier.note_applied(cmds)
            for fn in self._listeners:
                try:
                    fn(seq, cmds, results)
                except Exception:
                    log.exception("apply listener failed")

    def _on_state_changed(self, old: int, new: int) -> None:
        obj = self._obj                  # None once stop() began
        if new == 2 and obj is not None:
            self.replication.on_leadership()
            self._barrier.propose(obj.raftCurrentTerm)

    def _on_tick(self) -> None:
        while self._tick_tasks:
            self._tick_tasks.popleft()()
        obj = self._obj
        if obj is None:
            return
        _flush_acks(obj)
        obj.send_new_entries_now(self._journal)
        self._view = View.sample(obj, self._journal)
        if self.membership.refresh(other_nodes(obj), obj.raftLastApplied,
                                   current_log_index(obj)):
            self.peers, self._id_by_addr = self.membership.peers(), self.membership.id_by_addr()
        self._compact_when_due(obj)

    def _compact_when_due(self, obj: RaftObject) -> None:
        """Compact when this node's policy says so (compaction.py)."""
        journal = self._journal
        if journal is None or self._snapshots.busy or not len(journal):
            return
        applied = obj.raftLastApplied
        if self._compaction.due(applied_idx=applied, first_idx=journal[0][1],
                                applied_bytes=journal.applied_bytes(applied),
                                last_snapshot_bytes=self._snapshots.file_bytes,
                                now_s=time.time()):
            obj.forceLogCompaction()

    # --- snapshots (pysyncobj serializer hooks, Raft thread) ------------------------------

    def _serialize(self, _tmp_name: str, data: tuple[Entry, Entry, set[Node]]) -> None:
        """A forked child writes the snapshot (snapshot_writer.py)."""
        self._snapshots.fork(data, lambda: self._sm.snapshot(), self.membership.snapshot_cluster)

    def _check_serializing(self) -> int:
        return self._snapshots.check(self._obj)   # the child's outcome, published on success

    def _deserialize(self, file_name: str) -> tuple:
        """Restore the state machine from a snapshot: ours, or one received from the
        leader (snapshot_loader.py)."""
        self._snapshots.abandon()   # it holds an older state than this file
        self._snapshots.forget_file_bytes()
        raft_data, sm = snapshot_loader.load(Path(file_name), self.watchdog, self._restore_frozen)
        with self._lock:
            self._sm = sm
        del sm
        return raft_data

    def _restore_frozen(self, state: bytes) -> StateMachine:
        return snapshot_loader.restore_frozen(self._kit.restore, state, self._swap_in)

    def _swap_in(self, sm: StateMachine) -> bool:
        """Install `sm` now if the current state has applied commands (so that the old one
        can be collected); otherwise `_deserialize` installs it."""
        if not getattr(self._sm, "seq", 0):
            return False
        with self._lock:
            old, self._sm = self._sm, sm
        del old
        return True


def _stall_path(failpoints: Failpoints) -> Path | None:
    """The file that holds the log writer while it exists (`stall_log_writer`)."""
    return failpoints.path_of("stall_log_writer", ".stall")


def _flush_acks(obj: RaftObject) -> None:
    """Each tick: a follower's acknowledgements whose entries the log writer has made
    durable leave (transport.DeferredAcks); the writer's commit wakes the Raft thread.
    A leader's own durability may move its commit index too (own_durability.py)."""
    transport = transport_of(obj)
    if isinstance(transport, GuardedTransport):
        transport.flush_acks()
