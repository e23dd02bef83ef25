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
