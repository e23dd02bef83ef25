"""Applying committed entries a slice at a time: what `RaftObject` changes in pysyncobj's tick.

pysyncobj 0.3.17 applies every committed entry in the tick that sees it committed, and only
then sends heartbeats and reads its sockets. When many entries commit at once (a leader
catching up after a stall, a follower that was starved of CPU for a moment), that tick
holds the Raft thread for as long as they take: up to 1.36 s under full load on 2 cores,
past the 1 s election timeout (bench/notes/2026-12-02-raft-thread-stalls.md). Both followers apply the same entries
at the same moment, so both stopped answering the leader together and it stepped down.

`BoundedApply` applies committed entries until `apply_budget_s` of wall time has passed
(at least one entry per tick), and leaves the rest for the next ticks, which come at once:
`cut` tells the poller not to sleep. Between two slices the tick sends what is due
(heartbeats, new entries, answers) and reads its sockets, so a replica with a backlog to
apply still answers within about a slice. As etcd's raft bounds the committed entries
handed out per `Ready` (`MaxCommittedSizePerReady`). Entries are applied in the same order,
each once: only the point where a tick stops changes.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from tsched.node.raft.syncobj_adapter import (
    Entry, SyncObjHooks, appends_in_batches, apply_log_entry, entries_from, unapplied_count)

# Entries read from the journal per slice; a slice stops at whichever comes first.
ENTRIES_PER_READ = 64


class BoundedApply(SyncObjHooks):
    """A mixin of `RaftObject`: replaces pysyncobj's private `__applyLogEntries`."""

    apply_budget_s: float = 0.2    # `options.apply_budget_s(RaftOptions)` sets it
    slices_cut = 0        # ticks that stopped applying with committed entries left
    cut = False           # the last tick did: the next one must not wait
    clock = staticmethod(time.monotonic)

    def _unapplied(self) -> int:
        return unapplied_count(self)

    def _committed_entries(self) -> Iterator[Entry]:
        """The committed entries not applied yet, read from the log a chunk at a time (the
        applied index moves as the caller applies them)."""
        while unapplied_count(self) > 0:
            entries = entries_from(self, min(unapplied_count(self), ENTRIES_PER_READ))
            if not entries:
                return   # not in the log (a snapshot is being installed): nothing to apply
            yield from entries

    def apply_held(self) -> bool:
        """True to apply nothing this tick (the `stall_leader_apply` failpoint)."""
        return False

    def apply_committed(self) -> bool:
        if self.apply_held():
            self.cut = False
            return False
        deadline = self.clock() + self.apply_budget_s
        applied_any = self.cut = False
        for entry in self._committed_entries():
            if applied_any and self.clock() >= deadline:
                self.slices_cut += 1
                self.cut = True
                break
            apply_log_entry(self, entry)
            applied_any = True
        # pysyncobj answers True only with appendEntriesUseBatch off, which we never set.
        return applied_any and not appends_in_batches(self)
