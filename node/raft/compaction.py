"""When a replica compacts its Raft log: a pure policy (no I/O, no clock of its own).

pysyncobj compacts by entry count and age alone, at the same index and second on every
replica; its own triggers are set beyond reach (`options.COMPACTION_NEVER`) and the replica
asks `CompactionPolicy.due` on every tick instead. A snapshot is due once the applied log
passes this node's byte threshold, or its entry count or age enters this node's next period.

Replicas apply the same log, so equal thresholds had every node fork and write its snapshot
at the same moment: the three children and the copy-on-write faults of their parents starved
a 2-core machine at once (bench/notes/2026-12-04-snapshots-at-once.md). Each node therefore has a phase
(`compaction_phase`), which offsets its periods and scales its byte threshold.
"""
from __future__ import annotations

from collections.abc import Iterable
from tsched.node.raft.options import RaftOptions


def compaction_phase(self_id: str, peer_ids: Iterable[str]) -> float:
    """This node's place among the cluster's ids, as a share in [0, 0.5)."""
    ids = sorted([self_id, *peer_ids])
    return ids.index(self_id) / (2 * len(ids))


class CompactionPolicy:
    """One node's compaction thresholds, and the age period it last compacted in."""

    def __init__(self, options: RaftOptions, phase: float, now_s: float) -> None:
        self.options = options
        self.phase = phase
        self._compacted_time_period = self.period_of(now_s, options.compaction_min_time_s)

    def period_of(self, value: float, period: float) -> int:
        """Which of this node's periods a log index or a wall-clock second is in: a new
        period means a snapshot is due. Periods are offset by `phase`, so replicas compact
        `period` apart, never at an index or second another one uses."""
        return int((value + period * self.phase) // period)

    def bytes_threshold(self, last_snapshot_bytes: int) -> int:
        """This node's share of `compaction_min_bytes` (or of the last snapshot's size times
        `compaction_log_to_snapshot_ratio`, when larger): between a half and all of it, by
        its `phase`."""
        o = self.options
        proportional = last_snapshot_bytes * o.compaction_log_to_snapshot_ratio
        return int(max(o.compaction_min_bytes, proportional) * (1 - self.phase))

    def due(self, *, applied_idx: int, first_idx: int, applied_bytes: int,
            last_snapshot_bytes: int, now_s: float) -> bool:
        """Whether to compact now, for a log that begins at `first_idx`, is applied up to
        `applied_idx` and holds `applied_bytes` of applied commands. A true answer counts as
        a compaction in this age period."""
        o = self.options
        time_period = self.period_of(now_s, o.compaction_min_time_s)
        if (applied_bytes >= self.bytes_threshold(last_snapshot_bytes)
                # pysyncobj snapshots at the entry before the last applied one and keeps
                # that entry first in the log: the log began in the period of the next.
                or self.period_of(applied_idx, o.compaction_min_entries)
                > self.period_of(first_idx + 1, o.compaction_min_entries)
                or time_period > self._compacted_time_period):
            self._compacted_time_period = time_period
            return True
        return False
