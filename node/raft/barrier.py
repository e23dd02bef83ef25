"""A new leader's barrier: one entry proposed per term, and the leader ready (serving
reads and writes as the leader) only once it has applied that entry, so that it has applied
everything committed before its term (DESIGN.md section 4)."""
from __future__ import annotations

from typing import Callable

from pysyncobj import FAIL_REASON, SyncObj

from tsched.node.raft.machine_kit import MachineKit


class TermBarrier:
    """The barrier of this node's terms as leader: proposed, retried, and seen applied."""

    def __init__(self, self_id: str, kit: MachineKit, clock_ms: Callable[[], int],
                 raft_object: Callable[[], SyncObj | None]) -> None:
        self._self_id = self_id
        self._kit = kit
        self._clock_ms = clock_ms
        self._raft_object = raft_object   # the SyncObj, or None once the replica stopped
        self.ready_term = -1              # the last term whose barrier this node applied
        self._rid: str | None = None

    def propose(self, term: int) -> None:
        """Propose the barrier of `term` while this node leads in it, until it is taken."""
        obj = self._raft_object()
        if obj is None or not obj._isLeader() or obj.raftCurrentTerm != term:
            return
        rid = f"barrier:{self._self_id}:{term}"
        self._rid = rid
        blob = self._kit.encode_batch([self._kit.barrier(rid, self._clock_ms())])

        def done(_res: object, err: int) -> None:
            if err != FAIL_REASON.SUCCESS:
                self.propose(term)

        obj.apply(blob, callback=done)

    def note_applied(self, cmds: list) -> None:
        """On the Raft thread, for every applied batch: is this term's barrier in it?"""
        rid = self._rid
        if rid is not None and any(getattr(c, "request_id", None) == rid for c in cmds):
            self.ready_term = int(rid.rsplit(":", 1)[1])
