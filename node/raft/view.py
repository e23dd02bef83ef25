"""`View`: what other threads may know of Raft, sampled from the SyncObj on every tick and
swapped atomically (readers never touch pysyncobj's state)."""
from __future__ import annotations

from typing import NamedTuple

from pysyncobj import SyncObj

from tsched.node.raft.syncobj_adapter import RaftLog, raft_state

ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}


class View(NamedTuple):
    """What other threads may know of Raft: refreshed on every tick, swapped atomically."""

    role: int = 0
    term: int = 0
    leader: str | None = None          # raft address
    has_quorum: bool = False
    connected: frozenset[str] = frozenset()   # raft addresses of connected peers
    commit_index: int = 0
    last_applied: int = 0
    commit_term: int = 0               # term of the entry at commit_index (0: not in the log)

    @classmethod
    def sample(cls, obj: SyncObj, journal: RaftLog | None) -> View:
        """The view of the SyncObj `obj` (on the Raft thread), with its log `journal`."""
        peers = obj.otherNodes
        leader = obj._getLeader()
        return cls(
            role=raft_state(obj),
            term=obj.raftCurrentTerm,
            leader=leader.id if leader is not None else None,
            has_quorum=obj.hasQuorum,
            connected=frozenset(n.id for n in peers if obj.isNodeConnected(n)),
            commit_index=obj.raftCommitIndex,
            last_applied=obj.raftLastApplied,
            commit_term=term_at(journal, obj.raftCommitIndex),
        )


def term_at(journal: RaftLog | None, idx: int) -> int:
    """The term of the entry at `idx` in `journal` (0: no journal, or not in it)."""
    if journal is None or not len(journal):
        return 0
    pos = idx - journal[0][1]
    return journal[pos][2] if 0 <= pos < len(journal) else 0
