"""A leader's own stall does not depose it: what `RaftObject` changes in pysyncobj's fallback.

pysyncobj's leader steps down when fewer than a majority of its peers answered within
`leaderFallbackTimeout` (1 s), by the wall clock. A leader whose own Raft thread was held
for longer (CPU starvation, a slow fsync, a fork) sent nothing meanwhile, so nothing was
answered, and it stepped down on its next tick although every peer was well (ticks up
to 2 s apart under full load on 2 cores: bench/notes/2026-12-02-raft-thread-stalls.md,
bench/notes/2026-12-01-soak.md). etcd's raft counts
its check-quorum interval in ticks, which a stalled leader does not take, for this reason.

`forgive_stall` moves the time of each peer's last answer forward by the part of the gap
between two ticks beyond two heartbeat periods: the fallback then counts only time the
leader was ticking. A leader cut off from its peers still steps down after 1 s of ticks.
Followers are unchanged: one that stops hearing heartbeats (the leader stalled) may still
campaign, through pre-vote.
"""
from __future__ import annotations

from pysyncobj import SyncObj

from tsched.node.raft.syncobj_adapter import LEADER, last_response_times_s, raft_state


def forgive_stall(obj: SyncObj, gap_s: float, heartbeat_s: float, now: float) -> float:
    """Shift the leader's peers' last answer times by the stall; returns the seconds shifted."""
    excess_s = gap_s - 2 * heartbeat_s
    if excess_s <= 0 or raft_state(obj) != LEADER:
        return 0.0
    times = last_response_times_s(obj)
    for node in list(times):
        times[node] = min(now, times[node] + excess_s)
    return excess_s
