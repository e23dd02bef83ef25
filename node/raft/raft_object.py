"""`RaftObject`: the pysyncobj SyncObj of a replica, with its one replicated method and
the hooks around each tick (stall forgiveness, the rejoin gate, the watchdog)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pysyncobj import SyncObj, replicated
from pysyncobj.monotonic import monotonic as monotonicTime

from tsched.node.raft.apply_budget import BoundedApply
from tsched.node.raft.options import apply_budget_s, heartbeat_period_s
from tsched.node.raft.replication import WastelessAppendEntries
from tsched.node.raft.stall_clock import forgive_stall
from tsched.node.raft.transport import DialNode

if TYPE_CHECKING:
    from tsched.node.raft.replica import Replica


class RaftObject(BoundedApply, WastelessAppendEntries, SyncObj):
    def __init__(self, replica: "Replica", self_node, peers, conf, transport_class):
        self._replica = replica
        self.replication = replica.replication
        self.apply_budget_s = apply_budget_s(replica.options)
        self._heartbeat_s = heartbeat_period_s(replica.options)
        self._tick_started_at: float | None = None
        self.stall_forgiven_s = 0.0     # leader: stalls not counted against its peers
        self._last_sent_idx = 0
        self._last_sent_commit = 0
        # The tick thread starts inside SyncObj.__init__ and may call back at once.
        replica._obj = self
        super().__init__(self_node, peers, conf, nodeClass=DialNode,
                         transportClass=transport_class)

    def _onTick(self, timeToWait=0.0):
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
            self._replica.watchdog.tick_failed(exc)
            raise
        self._replica.watchdog.tick_ok()

    def _gate_campaign(self) -> None:
        """A node rejoining empty (or stopping) starts no election (and ends rejoining
        once caught up); any other asks for a pre-vote before it campaigns."""
        replica = self._replica
        if replica.rejoin.rejoining or replica.leaving:
            self._SyncObj__raftElectionDeadline = monotonicTime() + replica.options.raft_max_timeout_s
            replica.rejoin.check_caught_up(self)
        elif replica.prevote is not None:
            replica.prevote.before_tick(self)

    def send_new_entries_now(self, journal) -> None:
        """A leader sends entries added in this tick at once (one group commit for all of
        them) instead of at the next heartbeat: pysyncobj does so only with batching off,
        which costs one fsync per entry. Saves up to appendEntriesPeriod per proposal.
        Likewise when the commit index moved: followers then apply (and answer the writes
        they forwarded) without waiting for the next heartbeat."""
        if self._SyncObj__raftState != 2:
            return
        last = journal[-1][1] if journal is not None and len(journal) else 0
        commit = self.raftCommitIndex
        if last > self._last_sent_idx or commit > self._last_sent_commit:
            self._last_sent_idx = max(self._last_sent_idx, last)
            self._last_sent_commit = commit
            self._SyncObj__sendAppendEntries()

    @replicated
    def apply(self, blob):
        # The only replicated method (pysyncobj numbers them by name): never add another.
        self._replica._apply_blob(blob)
