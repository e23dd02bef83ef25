"""The Raft options (`RaftOptions`), the timings derived from them, and pysyncobj's
configuration (`sync_obj_conf`) built from them."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from pysyncobj import SyncObjConf

from tsched.node.config import ClusterConfig

# pysyncobj's own compaction bounds, set beyond reach: `Replica._compact_when_due` decides.
COMPACTION_NEVER = 1 << 62


@dataclass(frozen=True)
class RaftOptions:
    # Heartbeats (an AppendEntries with no new entry). New entries and a moved commit index
    # go out at once whatever this period (`RaftObject.send_new_entries_now`); it is capped
    # at a tenth of the election and leader-fallback timeouts (`heartbeat_period_s`). 0.1 s
    # against a 1 s election timeout, as etcd's defaults: heartbeats were most of an idle
    # replica's CPU (bench/notes/2026-12-02-shards-heartbeats.md).
    append_entries_period_s: float = 0.1
    # The Raft thread sleeps in its poll until an event (a message, a proposal through
    # `poller.Waker`) or its next timer (heartbeat due, election deadline), at least this
    # long and at most `idle_tick_max_s` (`poller.TimedPoller`): a fixed 5 ms poll cost every
    # idle replica process CPU (bench/notes/2026-12-01-shards-idle-cost-failover.md).
    auto_tick_period_s: float = 0.005
    # A tick applies committed entries for at most this long (and at most a fifth of the
    # election and leader-fallback timeouts), then sends and reads before it applies more
    # (`apply_budget.py`): a backlog to apply must not silence a replica for an election
    # timeout. Not shorter: that cut many more ticks for no gain
    # (bench/notes/2026-12-02-raft-thread-stalls.md).
    apply_budget_s: float = 0.2
    idle_tick_max_s: float = 0.1
    raft_min_timeout_s: float = 1.0
    raft_max_timeout_s: float = 2.5
    # An isolated leader steps down this soon (pysyncobj's default of 30 s would keep it
    # accepting writes it can never commit).
    leader_fallback_timeout_s: float = 1.0
    connection_retry_s: float = 1.0
    connection_timeout_s: float = 3.0
    # Each compaction forks and writes the whole state: every 20k entries or 10 minutes,
    # each node in its own phase (`Replica._compact_when_due`).
    compaction_min_entries: int = 20_000
    compaction_min_time_s: float = 600.0
    # ... or once the applied part of the log holds this many bytes: the in-memory log tail
    # costs RSS and a restart replays it, and entries carry up to thousands of commands, so
    # an entry count alone let a 1M-task fill stay in the log
    # (bench/notes/2026-11-30-memory-per-pending-task.md). Each node uses a share of it
    # (`Replica.compaction_bytes`).
    compaction_min_bytes: int = 32 << 20
    # ... but never before the applied log holds this share of the last snapshot's bytes:
    # a snapshot writes the whole state, so a fixed threshold made its cost grow with the
    # state (bench/notes/2026-12-01-soak.md). Proportional, the snapshot work per byte of
    # log stays constant, and the log tail (in memory, replayed on restart) stays under the
    # snapshot.
    compaction_log_to_snapshot_ratio: float = 1.0
    # The snapshot child runs at this `nice`: it is background work and must not take the
    # CPU from the Raft thread and the HTTP loop it was forked from.
    snapshot_child_nice: int = 10
    # Larger than any entry: pysyncobj's chunked sending of one oversized entry is broken.
    append_entries_batch_bytes: int = 2 << 20
    entry_bytes_max: int = 1 << 20
    message_bytes_max: int = 64 << 20
    snapshot_chunk_bytes: int = 1 << 20
    # pysyncobj writes at most one socket buffer per poll cycle: 64 KiB made a 1 MiB
    # append take a dozen ticks.
    socket_buffer_bytes: int = 4 << 20
    commands_queue_max: int = 10_000
    bind_retries_max: int = 10
    bind_retry_s: float = 0.5
    fsync: bool = True
    # The watchdog (watchdog.py): the node stops when its Raft thread shows no progress
    # this long (longer than any election timeout: /readyz is false from the election
    # timeout on), or fails this many ticks in a row.
    watchdog_stall_exit_s: float = 10.0
    watchdog_tick_failures_max: int = 50
    # Ask before campaigning (prevote.py); off only to measure what it saves.
    pre_vote: bool = True


def apply_budget_s(o: RaftOptions) -> float:
    return min(o.apply_budget_s, o.raft_min_timeout_s / 5, o.leader_fallback_timeout_s / 5)


def heartbeat_period_s(o: RaftOptions) -> float:
    """At most a tenth of the shortest election and leader-fallback timeouts: a follower
    hears several heartbeats before it would campaign, a leader several answers before it
    would step down (tests run with timeouts of 50 ms)."""
    return min(o.append_entries_period_s, o.raft_min_timeout_s / 10,
               o.leader_fallback_timeout_s / 10)



def options_from_cluster(cluster: ClusterConfig, options: RaftOptions | None = None) -> RaftOptions:
    """`options` (or the defaults) with the timeouts and compaction bounds of a
    `config.ClusterConfig`."""
    t = dict(getattr(cluster, "timeouts", None) or {})
    opts = options or RaftOptions()
    mapping = {"raft_min_s": "raft_min_timeout_s", "raft_max_s": "raft_max_timeout_s",
               "leader_fallback_s": "leader_fallback_timeout_s"}
    # Field name -> value: an int for the int fields, which mypy cannot tell by name.
    overrides: dict[str, float] = {mapping[k]: float(v) for k, v in t.items() if k in mapping}
    compaction = dict(getattr(cluster, "compaction", None) or {})
    if "min_entries" in compaction:
        overrides["compaction_min_entries"] = int(compaction["min_entries"])
    if "min_time_s" in compaction:
        overrides["compaction_min_time_s"] = float(compaction["min_time_s"])
    if "min_bytes" in compaction:
        overrides["compaction_min_bytes"] = int(compaction["min_bytes"])
    if overrides:
        opts = dataclasses.replace(opts, **overrides)   # type: ignore[arg-type]
    return opts


def sync_obj_conf(o: RaftOptions, *, password: str | None, bind_address: str, journal_file: str,
                  snapshot_file: str, serializer: Callable, deserializer: Callable,
                  serialize_checker: Callable, on_state_changed: Callable) -> SyncObjConf:
    """pysyncobj's configuration for these options, a node's address and files, and the
    replica's hooks (snapshots written and read by the replica, leadership changes)."""
    return SyncObjConf(
        password=password,
        autoTickPeriod=o.auto_tick_period_s,
        appendEntriesPeriod=heartbeat_period_s(o),
        raftMinTimeout=o.raft_min_timeout_s,
        raftMaxTimeout=o.raft_max_timeout_s,
        leaderFallbackTimeout=o.leader_fallback_timeout_s,
        connectionRetryTime=o.connection_retry_s,
        connectionTimeout=max(o.connection_timeout_s, o.raft_max_timeout_s),
        commandsWaitLeader=False,
        commandsQueueSize=o.commands_queue_max,
        bindAddress=bind_address,
        bindRetryTime=o.bind_retry_s,
        maxBindRetries=o.bind_retries_max,
        journalFile=journal_file,
        fullDumpFile=snapshot_file,
        serializer=serializer,
        deserializer=deserializer,
        serializeChecker=serialize_checker,
        # `Replica._compact_when_due` decides every compaction (pysyncobj's own triggers by
        # entry count and age fired on every replica at the same index or second).
        logCompactionMinEntries=COMPACTION_NEVER,
        logCompactionMinTime=COMPACTION_NEVER,
        logCompactionBatchSize=o.snapshot_chunk_bytes,
        appendEntriesBatchSizeBytes=o.append_entries_batch_bytes,
        sendBufferSize=o.socket_buffer_bytes,
        recvBufferSize=o.socket_buffer_bytes,
        # Members are added and removed by log entries (membership.py, DESIGN 6.2).
        dynamicMembershipChange=True,
        onStateChanged=on_state_changed,
    )
