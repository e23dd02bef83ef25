"""`tsnode --rejoin-empty`: discard a damaged node's data and rejoin without voting.

A node that lost its log and its vote must not vote until it has caught up: its vote in the
current term may already have gone to another candidate (two leaders in one term), and its
empty log would let a candidate that misses committed entries win. So the data directory
is emptied and a marker file (`REJOINING`) written; while the marker exists (it survives a
restart), `RejoinGate` makes the node grant no vote and start no election. Once it has
applied everything the leader says is committed, the gate records a vote for that leader in
the current term (so it grants no second vote in that term), removes the marker and lets
the node take part as any other.
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from pysyncobj import SyncObj

from tsched.node.raft.storage_faults import fsync_dir as _fsync_dir
from tsched.node.raft.syncobj_adapter import leader_commit_index, set_current_term, voted_for

log = logging.getLogger(__name__)

MARKER_NAME = "REJOINING"
DISCARDED = ("raft-log", "snapshot.bin", "snapshot.bin.fork.tmp")


def discard_data(data_dir: Path) -> None:
    """Empty the node's Raft data and leave the marker (the marker first, durably, so that
    a crash half-way still starts as a rejoining node)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    marker = data_dir / MARKER_NAME
    with open(marker, "wb") as f:
        f.write(b"discarded by tsnode --rejoin-empty; removed once caught up\n")
        os.fsync(f.fileno())
    _fsync_dir(data_dir)
    for name in DISCARDED:
        path = data_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for stray in data_dir.glob("snapshot.bin*"):   # pysyncobj's transfer temp files
        stray.unlink()
    _fsync_dir(data_dir)
    log.warning("discarded the Raft log and snapshot in %s: rejoining empty, voting in no "
                "election until caught up from the leader", data_dir)


class RejoinGate:
    """Whether this node may vote and campaign (Raft thread)."""

    def __init__(self, data_dir: Path) -> None:
        self.marker = Path(data_dir) / MARKER_NAME
        self.rejoining = self.marker.exists()

    def may_vote(self) -> bool:
        return not self.rejoining

    def check_caught_up(self, obj: SyncObj) -> None:
        """On each tick while rejoining: done once the leader's commit index is applied."""
        if not self.rejoining:
            return
        leader = obj._getLeader()
        leader_commit = leader_commit_index(obj)
        if leader is None or not leader_commit or obj.raftLastApplied < leader_commit:
            return
        if voted_for(obj) is None:
            # As if it had voted for the leader it follows: no second vote in this term.
            set_current_term(obj, obj.raftCurrentTerm, leader.id)
        self.marker.unlink()
        _fsync_dir(self.marker.parent)
        self.rejoining = False
        log.info("rejoined: caught up to index %d from leader %s in term %d; voting again",
                 obj.raftLastApplied, leader.id, obj.raftCurrentTerm)
