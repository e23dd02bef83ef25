"""A leader counts itself toward a majority only up to what its own log has made durable
(DESIGN.md section 6, "The log is written beside the Raft thread").

The leader hands new entries to the log writer (`LmdbJournal.sync_soon`) and sends them to
its followers at once, without waiting for its own fsync (Raft dissertation 10.2.1; etcd's
raft hands entries to persist and messages to send in the same `Ready`). pysyncobj 0.3.17
counts the leader for every entry in its log when it moves the commit index, so before the
tick applies anything (and answers a client), `OwnDurability` recomputes the commit index
with the leader counted only up to `durable_idx`.

Invariant OWN_DURABLE_COMMIT: a leader's commit index never exceeds the greatest index N
of its current term that a majority holds durably, the leader counted at its
`durable_idx`, each follower at its acknowledged match index (a follower acknowledges only
after its own fsync). The `count_unsynced_entries` failpoint breaks it on purpose.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Callable

from tsched.node.raft.syncobj_adapter import (
    LEADER, SyncObjHooks, match_indexes, other_nodes, raft_log, raft_state, set_commit_index)


def quorum_commit_index(commit_idx: int, own_durable_idx: int, matches: Iterable[int],
                        term_at: Callable[[int], int | None], current_term: int) -> int:
    """The commit index Raft allows: the greatest index held by a majority (the leader at
    `own_durable_idx`), if it is of the current term (Raft 5.4.2), else `commit_idx`."""
    held = sorted([own_durable_idx, *matches], reverse=True)
    candidate = held[len(held) // 2]          # held by len//2 + 1 voters: a majority
    if candidate > commit_idx and term_at(candidate) == current_term:
        return candidate
    return commit_idx


class OwnDurability(SyncObjHooks):
    """A mixin of `RaftObject`, in front of `BoundedApply`: its `apply_committed` first hands
    the log's new entries to the writer and lowers the commit index pysyncobj computed to
    what OWN_DURABLE_COMMIT allows."""

    count_unsynced_entries = False   # the failpoint: count the leader's unsynced entries
    commits_held_back = 0            # ticks whose commit index was lowered (metrics, tests)

    def apply_committed(self) -> bool:
        if raft_state(self) == LEADER:
            self._hold_back_commit()
        return super().apply_committed()  # type: ignore[no-any-return]

    def _hold_back_commit(self) -> None:
        journal = raft_log(self)
        durable_idx = getattr(journal, "durable_idx", None)
        if durable_idx is None or not len(journal):
            return
        journal.sync_soon()        # type: ignore[attr-defined]
        if self.count_unsynced_entries:
            return
        first = journal[0][1]

        def term_at(idx: int) -> int | None:
            pos = idx - first
            return journal[pos][2] if 0 <= pos < len(journal) else None

        computed = self.raftCommitIndex
        # Entries applied, or allowed before, are committed: the floor never moves back.
        floor = max(self._commit_floor, self.raftLastApplied)
        # Voters only, as pysyncobj counts: a read-only observer has a match index too.
        matches = match_indexes(self)
        allowed = quorum_commit_index(floor, durable_idx,
                                      [matches.get(n, 0) for n in other_nodes(self)],
                                      term_at, self.raftCurrentTerm)
        allowed = min(allowed, computed)
        self._commit_floor = allowed
        if allowed < computed:
            self.commits_held_back += 1
            set_commit_index(self, allowed)
            journal.setRaftCommitIndex(allowed)   # type: ignore[attr-defined]

    _commit_floor = 0    # the commit index this leader last allowed (never moves back)
