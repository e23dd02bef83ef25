"""`RaftObject`: the pysyncobj SyncObj of a replica, with its one replicated method and
the hooks around each tick (stall forgiveness, the rejoin gate, the watchdog).

It sees its replica through `RaftHost`, the part of `Replica` it uses: raft_object.py
knows nothing of replica.py, which builds the RaftObject."""
from __future__ import annotations

from typing import Protocol

from pysyncobj import SyncObjConf, replicated
from pysyncobj.monotonic import monotonic as monotonicTime
from pysyncobj.node import Node

from tsched.node.failpoints import Failpoints
from tsched.node.raft.applied_index import AppliedIndexWatcher
from tsched.node.raft.apply_budget import BoundedApply
from tsched.node.raft.own_durability import OwnDurability
from tsched.node.raft.options import RaftOptions, apply_budget_s, heartbeat_period_s
from tsched.node.raft.prevote import PreVote
from tsched.node.raft.rejoin import RejoinGate
from tsched.node.raft.replication import ReplicationStats, WastelessAppendEntries
from tsched.node.raft.stall_clock import forgive_stall
from tsched.node.raft.syncobj_adapter import (
    LEADER, RaftLog, raft_state, send_append_entries, set_election_deadline_s)
from tsched.node.raft.transport import DialNode, GuardedTransport
from tsched.node.raft.watchdog import Watchdog


class RaftHost(Protocol):
    """What a `RaftObject` needs of its replica (`replica.Replica`)."""

    options: RaftOptions
    replication: ReplicationStats
    watchdog: Watchdog
    rejoin: RejoinGate
    prevote: PreVote | None
    leaving: bool      # stopping: campaigns for nothing (handoff.py)
    failpoints: Failpoints
    applied_index: AppliedIndexWatcher   # told after each tick's apply

    def adopt(self, obj: RaftObject) -> None:
        """Hold `obj` as the replica's SyncObj (before its tick thread starts)."""

    def apply_blob(self, blob: bytes) -> None:
        """Apply one committed batch (the replicated method's body; never raises)."""


class TransportFactory(Protocol):
    def __call__(self, syncObj: RaftObject, selfNode: Node,
                 otherNodes: list[Node]) -> GuardedTransport: ...


class RaftObject(OwnDurability, BoundedApply, WastelessAppendEntries):
    def __init__(self, host: RaftHost, self_node: DialNode, peers: list[DialNode],
                 conf: SyncObjConf, transport_class: TransportFactory) -> None:
        self._host = host
        self.replication = host.replication
        fp = host.failpoints
        self.count_unsynced_entries = fp.on("count_unsynced_entries")
        self._apply_stall = (fp.path_of("stall_leader_apply", ".apply_stall")
                             or fp.path_of("stall_follower_apply", ".apply_stall"))
        self._stall_when_leading = fp.on("stall_leader_apply")
        self._applied_index = host.applied_index
        self._applied_index.bind(self)
        self.apply_budget_s = apply_budget_s(host.options)
        self._heartbeat_s = heartbeat_period_s(host.options)
        self._tick_started_at: float | None = None
        self.stall_forgiven_s = 0.0     # leader: stalls not counted against its peers
        self._last_sent_idx = 0
        self._last_sent_commit = 0
        # The tick thread starts inside SyncObj.__init__ and may call back at once.
        host.adopt(self)
        super().__init__(self_node, peers, conf, nodeClass=DialNode,
                         transportClass=transport_class)

    def _onTick(self, timeToWait: float = 0.0) -> None:
        # Hooks around pysyncobj's tick: the rejoin gate and a leader's stall before it,
        # the watchdog after.
        now = monotonicTime()
        if self._tick_started_at is not None:
            self.stall_forgiven_s += forgive_stall(self, now - self._tick_started_at,
                                                   self._heartbeat_s, now)
        self._tick_started_at = now
        self._gate_campaign()
        try:
            super()._onTick(timeToWait)
        except Exception as exc:
            self._host.watchdog.tick_failed(exc)
            raise
        self._host.watchdog.tick_ok()

    def apply_committed(self) -> bool:
        applied = super().apply_committed()
        self._applied_index.note()
        return applied

    def apply_held(self) -> bool:
        stall = self._apply_stall
        return (stall is not None and (raft_state(self) == LEADER) == self._stall_when_leading
                and stall.exists())

    def _gate_campaign(self) -> None:
        """A node rejoining empty (or stopping) starts no election (and ends rejoining
        once caught up); any other asks for a pre-vote before it campaigns."""
        host = self._host
        if host.rejoin.rejoining or host.leaving:
            set_election_deadline_s(self, monotonicTime() + host.options.raft_max_timeout_s)
            host.rejoin.check_caught_up(self)
        elif host.prevote is not None:
            host.prevote.before_tick(self)

    def send_new_entries_now(self, journal: RaftLog | None) -> None:
        """A leader sends entries added in this tick at once (one group commit for all of
        them) instead of at the next heartbeat: pysyncobj does so only with batching off,
        which costs one fsync per entry. Saves up to appendEntriesPeriod per proposal.
        Likewise when the commit index moved: followers then apply (and answer the writes
        they forwarded) without waiting for the next heartbeat."""
        if raft_state(self) != LEADER:
            return
        last = journal[-1][1] if journal is not None and len(journal) else 0
        commit = self.raftCommitIndex
        if last > self._last_sent_idx or commit > self._last_sent_commit:
            self._last_sent_idx = max(self._last_sent_idx, last)
            self._last_sent_commit = commit
            send_append_entries(self)

    @replicated
    def apply(self, blob: bytes) -> None:
        # The only replicated method (pysyncobj numbers them by name): never add another.
        self._host.apply_blob(blob)
